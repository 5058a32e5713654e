"""Re-read a Django model instance (``fetch_under_lock`` uses it via txnsafety.adapters)."""
from __future__ import annotations

from typing import Any

from django.db.models import Model


def is_model(entity: Any) -> bool:
    return isinstance(entity, Model)


def refetch(entity: Any) -> Any:
    """A fresh copy of ``entity`` from the database it was read from (``_base_manager``: no filtering)."""
    return type(entity)._base_manager.db_manager(entity._state.db).get(pk=entity.pk)


async def arefetch(entity: Any) -> Any:
    return await type(entity)._base_manager.db_manager(entity._state.db).aget(pk=entity.pk)
