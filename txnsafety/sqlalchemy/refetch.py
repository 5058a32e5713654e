"""Re-read a mapped object from its own Session (for ``fetch_under_lock``).

SQLAlchemy's identity map holds one object per row in a Session, so "re-read" means
refreshing that object in place: ``Session.get(type(obj), identity,
populate_existing=True)`` emits the SELECT and overwrites the loaded state; the
``refresh`` event then stamps it as read *now* (under the lock just taken).  The
async form uses the object's ``AsyncSession`` when it has one.
"""
from __future__ import annotations

from typing import Any

from sqlalchemy.orm import object_session
from sqlalchemy.orm.attributes import instance_state
from sqlalchemy.orm.exc import NO_STATE

from .. import adapters

__all__ = ["is_mapped_instance", "refetch", "arefetch", "register"]


def is_mapped_instance(obj: Any) -> bool:
    if isinstance(obj, type):
        return False
    try:
        instance_state(obj)
    except NO_STATE:
        return False
    return True


def _identity(obj: Any) -> tuple[Any, ...]:
    state = instance_state(obj)
    if state.key is None:
        raise TypeError(f"txnsafety: cannot re-read a {type(obj).__qualname__} that was never stored")
    return state.key[1]


def refetch(obj: Any) -> Any:
    """Refresh ``obj`` from the database in its Session and return it."""
    session = object_session(obj)
    if session is None:
        raise TypeError(f"txnsafety: cannot re-read a detached {type(obj).__qualname__}: add it to a "
                        "Session first (session.add(obj)) or re-read it by key")
    return session.get(type(obj), _identity(obj), populate_existing=True)


async def arefetch(obj: Any) -> Any:
    """Async :func:`refetch`: through the object's AsyncSession when it has one."""
    from sqlalchemy.ext.asyncio import async_object_session
    asession = async_object_session(obj)
    if asession is None:
        return refetch(obj)
    return await asession.get(type(obj), _identity(obj), populate_existing=True)


_registered = False


def register() -> None:
    """Register the refetcher with :mod:`txnsafety.adapters` (idempotent)."""
    global _registered
    if not _registered:
        adapters.register_refetcher(is_mapped_instance, refetch, arefetch)
        _registered = True
