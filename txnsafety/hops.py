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
from contextvars import ContextVar
from typing import Any

from .context import current_state
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
        scope = current_state()[0]  # (the context variable's own get: no Python call)
        if scope is None:
            return await original(self, *args, **kwargs)
        frame = user_frame(1)
        site = caller_site.get() if frame is None else \
            Site(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
        token, frame_token = caller_site.set(site), caller_frame.set(frame)
        chain_token = caller_chain.set(_chain(frame, scope))
        try:
            return await original(self, *args, **kwargs)
        finally:
            caller_site.reset(token)
            caller_frame.reset(frame_token)
            caller_chain.reset(chain_token)

    setattr(__call__, _MARK, True)
    SyncToAsync.__call__ = __call__  # type: ignore[method-assign]


#: The last chain a hop of this context (an ASGI request's task) took in its request's scope:
#: ``[scope, first frame, that frame's caller then, chain]``, emptied when the scope closes
#: (see :func:`_chain`).
_last_chain: ContextVar[list[Any] | None] = ContextVar("txnsafety_last_hop_chain", default=None)


def _chain(frame: Any, scope: Any) -> tuple[Any, ...]:
    """``frame`` and its callers, now, while the coroutines awaiting it still run (once the
    hop suspends them their ``f_back`` is None).  A hop inside a hop continues the outer chain.

    A view's hops mostly await from the same frame (``[await aget(pk) for pk in keys]``,
    one comprehension frame, or consecutive awaits in the view's own frame): when ``frame``
    and its caller are the ones the last hop of the request saw, that hop's chain is taken
    again rather than walked (12 hops walked about 20 frames each on the benchmark's async
    view, a quarter of the checker's work there).  Only the event loop's own frames past the
    task differ from a fresh walk (one step's ``_run_once`` for another's, kept alive by the
    chain): library frames, which no consumer (:func:`txnsafety.sites.outward`: a check's
    extent, its user caller, a site) stops at or marks.  The kept chain is let go when the
    request's scope closes: its frames reference the request's task, whose context keeps
    the chain (a cycle only the garbage collector would break)."""
    outer = caller_chain.get()
    if frame is None or (outer and outer[0] is frame):
        return outer
    caller = frame.f_back
    last = _last_chain.get()
    if (not outer and last and last[0] is scope and last[1] is frame and last[2] is caller
            and caller is not None):
        return last[3]
    frames = [frame]
    append = frames.append
    walked = caller
    while walked is not None:
        append(walked)
        walked = walked.f_back
    if outer:  # a hop inside a hop: walked, as before
        return tuple(frames) + outer
    chain = tuple(frames)
    if not last or last[0] is not scope:  # this request's first hop in this context
        last = []
        _last_chain.set(last)
        scope.add_cleanup(last.clear)
    last[:] = (scope, frame, caller, chain)
    return chain
