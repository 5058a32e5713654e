"""WSGI middleware: one checker scope per request.

Built on webob for reading the request (path and headers decide the lock
priority).  The scope stays open until the response body is exhausted or the
server closes it, so a streaming response is still checked while it generates,
and is closed — with any lock the request still holds released — even when the
body is abandoned.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, Iterator

from webob import Request

from .config import settings
from .context import RequestScope
from .request_headers import EnvironHeaders
from .scopes import PRIORITY_HEADER, close_request, open_request

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
            close_request(scope, token)
            raise
        return _ClosingBody(result, scope, token)


def _open(environ: dict) -> tuple[RequestScope, Any] | None:
    """Open the request's scope; None (and a log line) if the checker cannot."""
    if not settings.enabled:
        return None
    try:
        if settings.priority_rule is not None:  # the application's rule may read any header
            request = Request(environ)
            path, method = request.path_info or "/", request.method
            headers = {k.lower(): v for k, v in request.headers.items()}
        elif settings.sampler is not None:  # it may read any header: each read when it asks
            method, path = _method_and_path(environ)
            headers = EnvironHeaders(environ)
        else:  # the default rule reads one header
            method, path = _method_and_path(environ)
            headers = {PRIORITY_HEADER: environ.get("HTTP_X_TXNSAFETY_PRIORITY", "")}
    except Exception:
        log.exception("txnsafety: could not read this WSGI request; it runs unchecked")
        return None
    return open_request(method, path, headers)


def _method_and_path(environ: dict) -> tuple[str, str]:
    """``request.method`` and ``request.path_info or "/"`` of webob's ``Request(environ)``.

    Building the Request and decoding ``PATH_INFO`` through it costs more than the rest
    of opening the scope, on every request.  ``PATH_INFO`` is the path's bytes as latin-1
    text (PEP 3333), which webob decodes with the request's URL encoding; an ASCII path
    (most of them) reads the same in any of them.  Any other path is left to webob.
    """
    path = environ["PATH_INFO"]
    if not (isinstance(path, str) and path.isascii()):
        path = Request(environ).path_info
    return environ.get("REQUEST_METHOD", "GET"), path or "/"


class _ClosingBody:
    """The response body, closing the checker scope when the body is exhausted or when
    the server closes it, whichever comes first.

    Exhaustion counts because not every caller closes: Werkzeug's test client hands
    the response to the test unclosed, so without it the code a test runs after
    ``client.post(...)`` would still be judged as part of that request.
    """

    def __init__(self, body: Iterable[bytes], scope: RequestScope, token: Any) -> None:
        self._body = body
        self._scope = scope
        self._token = token
        self._closed = False
        self._scope_open = True

    def __iter__(self) -> Iterator[bytes]:
        yield from self._body
        self._end_scope()  # exhausted: the request is over (close() may never come)

    def _end_scope(self) -> None:
        if self._scope_open:
            self._scope_open = False
            close_request(self._scope, self._token)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            close = getattr(self._body, "close", None)
            if close is not None:
                close()
        finally:
            self._end_scope()
