"""WSGI middleware: one checker scope per request.

Built on webob for reading the request (path and headers decide the lock
priority).  A body that is already made (a list, Flask's usual response) ends the
scope when the application returns.  A streamed body keeps it until the body is
exhausted or the server closes it, so a streaming response is still checked while
it generates, and is closed — with any lock the request still holds released — even
when the body is abandoned; between its pieces the caller's own code runs outside
the request (a test after Flask's ``client.post()``).
"""
from __future__ import annotations

import logging
import types
from typing import Any, Callable, Iterable, Iterator

from webob import Request

from .config import settings
from .context import RequestScope
from .request_headers import EnvironHeaders
from .scopes import PRIORITY_HEADER, DetachedRequest, close_request, open_request
from .wrapping import forwarded_attribute

log = logging.getLogger("txnsafety")

WSGIApp = Callable[[dict, Callable[..., Any]], Iterable[bytes]]


class TxnSafetyMiddleware:
    """Wrap a WSGI application: ``app = TxnSafetyMiddleware(app)``.

    Transparent to attribute look-ups: an attribute it does not have itself is the
    wrapped application's (``app.wsgi_app.x_for`` of a ``ProxyFix`` inside it still
    works), as code and tests that inspect a middleware stack expect.  Only ``app``,
    the wrapped application itself, and ``__wrapped__`` (the same) are its own.
    """

    def __init__(self, app: WSGIApp) -> None:
        if not callable(app):
            raise TypeError(f"TxnSafetyMiddleware wraps a WSGI callable, not {app!r}")
        self.app = app
        self.__wrapped__ = app

    def __getattr__(self, name: str) -> Any:
        return forwarded_attribute(self, name)

    def __call__(self, environ: dict, start_response: Callable[..., Any]) -> Iterable[bytes]:
        if not settings.enabled:  # installed but off: no call of ours
            return self.app(environ, start_response)
        opened = _open(environ)
        if opened is None:
            return self.app(environ, start_response)
        scope, token = opened
        try:
            result = self.app(environ, start_response)
        except BaseException:
            close_request(scope, token)
            raise
        if type(result) is list or not _is_streamed(result):  # (a list: _is_streamed's first answer)
            close_request(scope, token)  # the request is over: what the caller runs next is not
            return result
        return _ClosingBody(result, DetachedRequest(scope, token))


def _open(environ: dict) -> tuple[RequestScope, Any] | None:
    """Open the request's scope; None (and a log line) if the checker cannot."""
    try:
        if settings.priority_rule is not None:  # the application's rule may read any header
            request = Request(environ)
            path, method = request.path_info or "/", request.method
            headers = {k.lower(): v for k, v in request.headers.items()}
        elif settings.sampler is not None:  # it may read any header: each read when it asks
            method, path = _method_and_path(environ)
            headers = EnvironHeaders(environ)
        else:  # the default rule reads one header; _method_and_path's ASCII path inline (every request)
            path = environ["PATH_INFO"]
            method, path = (environ.get("REQUEST_METHOD", "GET"), path or "/") if (
                isinstance(path, str) and path.isascii()) else _method_and_path(environ)
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


def _is_streamed(body: Iterable[bytes]) -> bool:
    """False for a body that is already made: nothing of the application runs after it
    was returned, so the request is over when the application returns.

    A list or tuple (PEP 3333's usual answer), or Werkzeug's (Flask's) response object
    whose body is a sequence (``is_streamed`` False) with no ``call_on_close`` callbacks:
    Werkzeug wraps it in a ``ClosingIterator`` whose callbacks include the response's
    ``close``.  Those are Werkzeug's private attributes, read defensively: anything else
    counts as streamed, which only keeps the scope open until the body ends.
    """
    if isinstance(body, (list, tuple)):
        return False
    werkzeug = _werkzeug_types.get(type(body))
    if werkzeug is None:  # once per type of body (a few: bounded all the same)
        module = type(body).__module__
        werkzeug = module.startswith("werkzeug.") or module == "werkzeug"
        if len(_werkzeug_types) < 64:
            _werkzeug_types[type(body)] = werkzeug
    if not werkzeug:
        return True
    try:
        for callback in getattr(body, "_callbacks", ()):
            response = getattr(callback, "__self__", None)
            if type(response) is _Generator:
                continue  # the body's own close (Werkzeug's iter_encoded()): asked of every Flask response
            if getattr(callback, "__name__", "") == "close" and hasattr(response, "is_streamed"):
                if type(getattr(response, "response", None)) is list:  # what is_streamed asks (len()), inline
                    return bool(getattr(response, "_on_close", True))
                return bool(response.is_streamed or getattr(response, "_on_close", True))
    except Exception:
        log.exception("txnsafety: could not tell whether a Werkzeug response streams; treating it as streamed")
    return True


#: body type -> whether it is Werkzeug's (its module asked once per type: every Flask response asks)
_werkzeug_types: dict[type, bool] = {}
_Generator = types.GeneratorType


class _ClosingBody:
    """A streamed response body: its code runs in the request's scope, which ends when
    the body is exhausted or when the server closes it, whichever comes first.

    Between two pieces of the body the caller's own state is current, not the request's:
    Werkzeug's test client hands the response to the test unread and unclosed, and what
    the test runs after ``client.post(...)`` is the test's code, not the request's.
    Exhaustion ends the scope because not every caller closes.
    """

    def __init__(self, body: Iterable[bytes], request: DetachedRequest) -> None:
        self._body = body
        self._iterator: Iterator[bytes] | None = None
        self._request = request
        self._closed = False
        self._scope_open = True

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        if not self._scope_open:
            raise StopIteration
        try:
            return self._request.run(self._next_piece)
        except StopIteration:
            self._end_scope()  # exhausted: the request is over (close() may never come)
            raise

    def _next_piece(self) -> bytes:
        if self._iterator is None:
            self._iterator = iter(self._body)
        return next(self._iterator)

    def _end_scope(self) -> None:
        if self._scope_open:
            self._scope_open = False
            self._request.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            close = getattr(self._body, "close", None)
            if close is not None:
                self._request.run(close)  # the application's cleanup is the request's code
        finally:
            self._end_scope()
