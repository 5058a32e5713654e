"""WSGI middleware: one checker scope per request.

Built on webob for reading the request (path and headers decide the lock
priority).  The scope stays open until the server closes the response body, so
a streaming response is still checked while it generates, and is closed — with
any lock the request still holds released — even when the body is abandoned.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, Iterator

from webob import Request

from .config import settings
from .context import RequestScope, close_scope, open_scope

log = logging.getLogger("txnsafety")

WSGIApp = Callable[[dict, Callable[..., Any]], Iterable[bytes]]


class TxnSafetyMiddleware:
    """Wrap a WSGI application: ``app = TxnSafetyMiddleware(app)``."""

    def __init__(self, app: WSGIApp) -> None:
        if not callable(app):
            raise TypeError(f"TxnSafetyMiddleware wraps a WSGI callable, not {app!r}")
        self.app = app

    def __call__(self, environ: dict, start_response: Callable[..., Any]) -> Iterable[bytes]:
        opened = _open(environ)
        if opened is None:
            return self.app(environ, start_response)
        scope, token = opened
        try:
            result = self.app(environ, start_response)
        except BaseException:
            _close(scope, token)
            raise
        return _ClosingBody(result, scope, token)


def _open(environ: dict) -> tuple[RequestScope, Any] | None:
    """Open the request's scope; None (and a log line) if the checker cannot."""
    if not settings.enabled:
        return None
    try:
        request = Request(environ)
        path = request.path_info or "/"
        headers = {k.lower(): v for k, v in request.headers.items()}
        scope = RequestScope(name=f"{request.method} {path}",
                             priority=settings.priority_for(path, headers))
        return scope, open_scope(scope)
    except Exception:
        log.exception("txnsafety: could not open a scope for this request; it runs unchecked")
        return None


def _close(scope: RequestScope, token: Any) -> None:
    try:
        close_scope(scope, token)
    except Exception:
        log.exception("txnsafety: error while closing request %s", scope.id)


class _ClosingBody:
    """The response body, closing the checker scope when the server closes it."""

    def __init__(self, body: Iterable[bytes], scope: RequestScope, token: Any) -> None:
        self._body = body
        self._scope = scope
        self._token = token
        self._closed = False

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._body)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            close = getattr(self._body, "close", None)
            if close is not None:
                close()
        finally:
            _close(self._scope, self._token)
