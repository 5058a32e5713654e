"""ASGI middleware: one checker scope per HTTP request.

Built on asgiref (``guarantee_single_callable`` accepts ASGI2 and ASGI3 apps).
The scope is a context variable set in the task that serves the request, so
tasks spawned by the handler and ``sync_to_async`` hops see it too.  Lifespan
and websocket scopes pass straight through: they are not requests.
"""
from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable, Iterable, MutableMapping

from asgiref.compatibility import guarantee_single_callable

from .config import settings
from . import hops
from .context import RequestScope
from .request_headers import ASGIHeaders
from .scopes import PRIORITY_HEADER, close_request, open_request
from .wrapping import forwarded_attribute

log = logging.getLogger("txnsafety")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class TxnSafetyASGIMiddleware:
    """Wrap an ASGI application: ``app = TxnSafetyASGIMiddleware(app)``.

    Transparent to attribute look-ups: an attribute it does not have itself is the
    wrapped application's (``app.state``, ``app.routes``, ``app.url_path_for`` of a
    Starlette or FastAPI app it wraps still work).  Its own are ``app`` (the wrapped
    application as an ASGI3 callable) and ``__wrapped__`` (the application as given).
    """

    def __init__(self, app: Any) -> None:
        if not callable(app):
            raise TypeError(f"TxnSafetyASGIMiddleware wraps an ASGI application, not {app!r}")
        self.__wrapped__ = app
        self.app = guarantee_single_callable(app)
        hops.install()  # sync_to_async hops report the awaiting line, not asgiref's

    def __getattr__(self, name: str) -> Any:
        return forwarded_attribute(self, name)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        opened = _open(scope) if settings.enabled and scope.get("type") == "http" else None
        if opened is None:
            await self.app(scope, receive, send)
            return
        request_scope, token = opened
        try:
            await self.app(scope, receive, send)
        finally:
            close_request(request_scope, token)


def _open(scope: Scope) -> tuple[RequestScope, Any] | None:
    try:
        if settings.priority_rule is not None:  # the application's rule may read any header
            headers = {bytes(name).decode("latin-1").lower(): bytes(value).decode("latin-1")
                       for name, value in scope.get("headers") or ()}
        elif settings.sampler is not None:  # it may read any header: each read when it asks
            headers = ASGIHeaders(scope.get("headers") or ())
        else:  # the default rule reads one header: do not decode them all
            headers = {PRIORITY_HEADER: _priority_header(scope.get("headers") or ())}
    except Exception:
        log.exception("txnsafety: could not read this ASGI request's headers; it runs unchecked")
        return None
    return open_request(str(scope.get("method", "?")), scope.get("path") or "/", headers)


_PRIORITY_NAME = PRIORITY_HEADER.encode("latin-1")


def _priority_header(raw: Iterable[tuple[bytes, bytes]]) -> str:
    """The value of the priority header (the last one, as a dict of all headers keeps), or ""."""
    value = ""
    for name, raw_value in raw:
        if len(name) == len(_PRIORITY_NAME) and bytes(name).lower() == _PRIORITY_NAME:
            value = bytes(raw_value).decode("latin-1")
    return value
