"""Report sites across ``asgiref.sync_to_async`` hops.

Django's async ORM (``aget``, ``asave``) runs the sync ORM in a worker thread
through ``sync_to_async``.  That thread's stack holds asgiref and Django frames
only; the user's ``await Model.objects.aget(...)`` is in a coroutine on the event
loop.  While a checker scope is open, :func:`install` makes each hop remember the
awaiting user frame in :data:`txnsafety.sites.caller_site` (a context variable the
hop copies into the thread), so reports made in the thread point at that line, and
the frame itself in :data:`txnsafety.sites.caller_frame` (a count compared with a
limit is told by the awaiting line's code, :mod:`txnsafety.limits`), and the frames
awaiting it in :data:`txnsafety.sites.caller_chain`: once the hop suspends them their
``f_back`` is None, and TXN105 asks whether a check's caller still runs.
"""
from __future__ import annotations

import functools
from typing import Any

from .context import current_scope
from .sites import Site, caller_chain, caller_frame, caller_site, user_frame

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
        frame = user_frame(1)
        site = caller_site.get() if frame is None else \
            Site(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
        token, frame_token = caller_site.set(site), caller_frame.set(frame)
        chain_token = caller_chain.set(_chain(frame))
        try:
            return await original(self, *args, **kwargs)
        finally:
            caller_site.reset(token)
            caller_frame.reset(frame_token)
            caller_chain.reset(chain_token)

    setattr(__call__, _MARK, True)
    SyncToAsync.__call__ = __call__  # type: ignore[method-assign]


def _chain(frame: Any) -> tuple[Any, ...]:
    """``frame`` and its callers, now, while the coroutines awaiting it still run (once the
    hop suspends them their ``f_back`` is None).  A hop inside a hop continues the outer chain."""
    outer = caller_chain.get()
    if frame is None or (outer and outer[0] is frame):
        return outer
    frames = []
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    return tuple(frames) + outer if outer else tuple(frames)
