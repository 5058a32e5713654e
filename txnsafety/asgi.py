"""ASGI middleware: one checker scope per HTTP request.

Built on asgiref (``guarantee_single_callable`` accepts ASGI2 and ASGI3 apps).
The scope is a context variable set in the task that serves the request, so
tasks spawned by the handler and ``sync_to_async`` hops see it too.  Lifespan
and websocket scopes pass straight through: they are not requests.
"""
from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable, MutableMapping

from asgiref.compatibility import guarantee_single_callable

from .config import settings
from .context import RequestScope, close_scope, open_scope

log = logging.getLogger("txnsafety")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class TxnSafetyASGIMiddleware:
    """Wrap an ASGI application: ``app = TxnSafetyASGIMiddleware(app)``."""

    def __init__(self, app: Any) -> None:
        if not callable(app):
            raise TypeError(f"TxnSafetyASGIMiddleware wraps an ASGI application, not {app!r}")
        self.app = guarantee_single_callable(app)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        opened = _open(scope) if settings.enabled and scope.get("type") == "http" else None
        if opened is None:
            await self.app(scope, receive, send)
            return
        request_scope, token = opened
        try:
            await self.app(scope, receive, send)
        finally:
            try:
                close_scope(request_scope, token)
            except Exception:
                log.exception("txnsafety: error while closing request %s", request_scope.id)


def _open(scope: Scope) -> tuple[RequestScope, Any] | None:
    try:
        path = scope.get("path") or "/"
        if not isinstance(path, str):
            raise TypeError(f"ASGI scope 'path' must be str, got {type(path).__name__}")
        headers: dict[str, str] = {}
        for pair in scope.get("headers") or ():
            name, value = pair
            headers[bytes(name).decode("latin-1").lower()] = bytes(value).decode("latin-1")
        request_scope = RequestScope(name=f"{scope.get('method', '?')} {path}",
                                     priority=settings.priority_for(path, headers))
        return request_scope, open_scope(request_scope)
    except Exception:
        log.exception("txnsafety: could not open a scope for this ASGI request; it runs unchecked")
        return None
