"""How to re-read an entity from its own data layer.

``fetch_under_lock(entity)`` must re-read the entity after taking the lock, and
that read goes through whatever ORM the entity came from.  Each integration
registers a refetcher for its base class (Django ``Model``, SQLAlchemy mapped
objects); a generic model can instead define ``txnsafety_refetch(self)`` (and
``async txnsafety_arefetch(self)``).
"""
from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

Refetch = Callable[[Any], Any]
ARefetch = Callable[[Any], Awaitable[Any]]

_refetchers: list[tuple[Callable[[Any], bool], Refetch, ARefetch | None]] = []


def register_refetcher(applies: Callable[[Any], bool], refetch: Refetch,
                       arefetch: ARefetch | None = None) -> None:
    """Use ``refetch(entity)`` for entities where ``applies(entity)`` is true.

    Later registrations win, so an application can override an integration.
    """
    _refetchers.insert(0, (applies, refetch, arefetch))


def _find(entity: Any) -> tuple[Refetch, ARefetch | None]:
    method = getattr(entity, "txnsafety_refetch", None)
    if callable(method):
        amethod = getattr(entity, "txnsafety_arefetch", None)
        return (lambda e: e.txnsafety_refetch()), (
            (lambda e: e.txnsafety_arefetch()) if callable(amethod) else None)
    for applies, refetch, arefetch in _refetchers:
        if applies(entity):
            return refetch, arefetch
    raise TypeError(
        f"txnsafety: no way to re-read a {type(entity).__qualname__}: install the Django or SQLAlchemy "
        "integration, define txnsafety_refetch(), or call txnsafety.adapters.register_refetcher()")


def refetch(entity: Any) -> Any:
    """A fresh copy of ``entity`` read from the database now."""
    fn, _ = _find(entity)
    return fn(entity)


async def arefetch(entity: Any) -> Any:
    """Async :func:`refetch`; a sync-only refetcher runs in a worker thread."""
    fn, afn = _find(entity)
    if afn is not None:
        return await afn(entity)
    from asgiref.sync import sync_to_async
    return await sync_to_async(fn, thread_sensitive=True)(entity) if _has_running_loop() else fn(entity)


def _has_running_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
