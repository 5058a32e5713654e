"""Opening and closing a request's checker scope, shared by every middleware.

WSGI, ASGI and Django middleware differ only in how they read the method, path
and headers; what a request scope is, how its lock priority is chosen and how a
failure to open one is handled (logged; the request runs unchecked) lives here.
"""
from __future__ import annotations

import functools
import logging
import random
from contextvars import ContextVar, Token
from typing import Callable, Mapping, TypeVar

from .config import settings
from .context import Priority, RequestScope, UncheckedToken, close_scope, open_left_out, open_scope

log = logging.getLogger("txnsafety")

_T = TypeVar("_T")

#: The one header the default priority rule reads (lower case, as ``headers`` has them).
PRIORITY_HEADER = "x-txnsafety-priority"


def open_request(method: str, path: str, headers: Mapping[str, str]
                 ) -> tuple[RequestScope, Token | UncheckedToken] | None:
    """Open and make current the scope of one HTTP request.

    ``headers`` has lower-case names; under the default priority rule and with no
    ``sampler`` (neither configured) only :data:`PRIORITY_HEADER` is needed.  Returns
    None (after logging why) when the checker is off or the request cannot be read:
    the request must still run.  A request the sample leaves out (``sample_rate``, or the
    ``sampler``'s share for it) gets a scope its locks use and the checker does not see.
    """
    if not settings.enabled:
        return None
    try:
        if not isinstance(path, str):
            raise TypeError(f"request path must be str, got {type(path).__name__}")
        if settings.priority_rule is None:
            # The default rule (a batch path or header) is decided when a lock first asks:
            # most requests take no lock, and deciding costs more than opening the scope.
            priority = functools.partial(decide_priority, path, headers)
        else:  # the application's own rule runs now, as it always has (its errors included)
            priority = decide_priority(path, headers)
        # sample_rate, inline (every request); a sampler's answer when one is set (rate_for reads it again:
        # another thread may have removed it since)
        rate = settings.sample_rate if settings.sampler is None else settings.rate_for(method, path, headers)
        if rate < 1.0 and _draw() >= rate:  # left out: a scope for its locks only
            return open_left_out(f"{method} {path}", priority)
        scope = RequestScope(name=f"{method} {path}", priority=priority)
        return scope, open_scope(scope)
    except Exception:
        log.exception("txnsafety: could not open a scope for this request; it runs unchecked")
        return None


def decide_priority(path: str, headers: Mapping[str, str]) -> Priority:
    """The request's lock priority; interactive (and a log line) if deciding it fails.

    ``settings.priority_for`` already guards the application's rule and the header, but
    it may be called long after the scope opened, by the first lock the request takes:
    a failure of the checker's own code there would fail the lock, so the request.  A
    priority only orders lock waiters: the default one is always a safe answer.
    """
    try:
        return settings.priority_for(path, headers)
    except Exception:
        log.exception("txnsafety: could not decide the lock priority of %.200s; it runs at interactive priority",
                      path)
        return Priority.INTERACTIVE


#: which requests ``sample_rate`` checks: a uniform draw per request (not a secret)
_draw = random.random


def close_request(scope: RequestScope, token: Token | UncheckedToken | None) -> None:
    """Close the scope (running its cleanups, e.g. releasing locks).  Never raises."""
    try:
        close_scope(scope, token)
    except Exception:
        log.exception("txnsafety: error while closing request %s", scope.id)


class DetachedRequest:
    """A request whose application has returned a body still to be generated.

    The request's checker state (its scope, transactions and locks: the context variables
    ``open_request`` set) is set aside when the application returns, and the caller's put
    back: what the caller runs next (a test after Flask's ``client.post()``, which hands
    the body back unread and unclosed) is its own code, not the request's.  The body's
    code runs in the request's state again (:meth:`run`), and the scope ends when the body
    is exhausted or closed.  Made only with the token ``open_request`` returned, in the
    same context; if that fails the request simply stays current, as before (logged).
    """

    __slots__ = ("scope", "_saved")

    def __init__(self, scope: RequestScope, token: Token | UncheckedToken) -> None:
        self.scope = scope
        tokens = (token.state, token.unchecked) if isinstance(token, UncheckedToken) else (token,)
        #: (context variable, the request's value of it); empty when the request stayed current
        self._saved: tuple[tuple[ContextVar, object], ...] = ()
        try:
            saved = tuple((t.var, t.var.get()) for t in tokens)
            for t in reversed(tokens):
                t.var.reset(t)
            self._saved = saved
        except Exception:
            log.exception("txnsafety: could not set request %s aside; its scope stays current until its body ends",
                          scope.id)

    def run(self, function: Callable[..., _T], *args: object) -> _T:
        """``function(*args)`` in the request's state (what it changes there is kept)."""
        saved = self._saved
        if not saved:
            return function(*args)
        tokens = [var.set(value) for var, value in saved]
        try:
            return function(*args)
        finally:
            self._saved = tuple((var, var.get()) for var, _ in saved)
            for (var, _), token in zip(reversed(saved), reversed(tokens)):
                var.reset(token)

    def close(self) -> None:
        """End the request's scope (its cleanups run, e.g. locks released).  Never raises."""
        close_request(self.scope, None)
