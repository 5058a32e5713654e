"""Django middleware: one checker scope per request, sync and async.

``MIDDLEWARE = ["txnsafety.django.middleware.TxnSafetyMiddleware", ...]`` —
put it first, so that everything the other middleware reads and writes is
checked too.  Under ASGI it runs natively async (no thread hop); under WSGI it
is a plain callable.  The scope is a context variable: ``sync_to_async`` hops,
the async ORM (``aget``, ``asave``) and tasks spawned by the view see it.

A streaming response's body runs after the view returns, outside the scope:
reads and writes made while streaming are not checked.
"""
from __future__ import annotations

import logging
from typing import Any, Callable

from asgiref.sync import iscoroutinefunction, markcoroutinefunction

from ..config import settings
from ..context import RequestScope
from ..request_headers import EnvironHeaders
from ..scopes import close_request, open_request

log = logging.getLogger("txnsafety")


class TxnSafetyMiddleware:
    """Open a :class:`~txnsafety.context.RequestScope` for each request."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[Any], Any]) -> None:
        if get_response is None:
            raise ValueError("TxnSafetyMiddleware needs get_response")
        self.get_response = get_response
        self.async_mode = iscoroutinefunction(get_response)
        if self.async_mode:
            markcoroutinefunction(self)
        from .apps import activate
        activate()  # works even when the app is not in INSTALLED_APPS

    def __call__(self, request: Any) -> Any:
        if self.async_mode:
            return self.__acall__(request)
        opened = _open(request)
        if opened is None:
            return self.get_response(request)
        try:
            return self.get_response(request)
        finally:
            close_request(*opened)

    async def __acall__(self, request: Any) -> Any:
        opened = _open(request)
        if opened is None:
            return await self.get_response(request)
        try:
            return await self.get_response(request)
        finally:
            close_request(*opened)


def _open(request: Any) -> tuple[RequestScope, Any] | None:
    if not settings.enabled:
        return None
    try:
        path = request.path_info or "/"
        method = request.method
        if settings.priority_rule is not None:
            headers = {k.lower(): v for k, v in request.headers.items()}
        elif settings.sampler is not None:  # it may read any header: each read when it asks
            headers = EnvironHeaders(request.META)
        else:  # the default rule reads one header: do not build the whole mapping
            headers = {"x-txnsafety-priority": request.META.get("HTTP_X_TXNSAFETY_PRIORITY", "")}
    except Exception:
        log.exception("txnsafety: could not read this Django request; it runs unchecked")
        return None
    # close_request() puts back the caller's transaction and lease stacks: a request can
    # run inside another scope (Django's test client called from a test holding a lock).
    return open_request(method, path, headers)
