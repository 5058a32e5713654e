"""Report sites across ``asgiref.sync_to_async`` hops.

Django's async ORM (``aget``, ``asave``) runs the sync ORM in a worker thread
through ``sync_to_async``.  That thread's stack holds asgiref and Django frames
only; the user's ``await Model.objects.aget(...)`` is in a coroutine on the event
loop.  While a checker scope is open, :func:`install` makes each hop remember the
awaiting user frame in :data:`txnsafety.sites.caller_site` (a context variable the
hop copies into the thread), so reports made in the thread point at that line.
"""
from __future__ import annotations

import functools
from typing import Any

from .context import current_scope
from .sites import caller_site, user_site

_MARK = "__txnsafety_hop__"


def install() -> None:
    """Wrap ``SyncToAsync.__call__`` once (idempotent; costs nothing outside a scope)."""
    from asgiref.sync import SyncToAsync

    original = SyncToAsync.__call__
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    async def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        if current_scope() is None:
            return await original(self, *args, **kwargs)
        token = caller_site.set(user_site(1) or caller_site.get())
        try:
            return await original(self, *args, **kwargs)
        finally:
            caller_site.reset(token)

    setattr(__call__, _MARK, True)
    SyncToAsync.__call__ = __call__  # type: ignore[method-assign]
