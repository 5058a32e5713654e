"""Wrapping middleware stays transparent to attribute look-ups.

An application's own code and tests inspect its middleware stack by attribute:
``app.wsgi_app.x_for`` of the ``ProxyFix`` around a Flask app, ``app.state`` and
``app.url_path_for`` of a Starlette/FastAPI app.  With txnsafety's middleware around
them those still work, and requests still pass through every layer (real servers).
"""
from __future__ import annotations

import copy

import pytest

import txnsafety
from fixtures.http_servers import asgi_server, get_json, wsgi_server
from txnsafety.asgi import TxnSafetyASGIMiddleware
from txnsafety.wsgi import TxnSafetyMiddleware


def test_flask_behind_proxyfix_keeps_its_attributes():
    flask = pytest.importorskip("flask")
    from werkzeug.middleware.proxy_fix import ProxyFix

    app = flask.Flask(__name__)

    @app.get("/whoami")
    def whoami():
        return {"addr": flask.request.remote_addr, "scope": txnsafety.current_scope().name}

    app.wsgi_app = ProxyFix(app.wsgi_app, x_for=1, x_proto=1)
    app.wsgi_app = TxnSafetyMiddleware(app.wsgi_app)
    assert (app.wsgi_app.x_for, app.wsgi_app.x_proto, app.wsgi_app.x_host) == (1, 1, 0)
    assert isinstance(app.wsgi_app.__wrapped__, ProxyFix) and app.wsgi_app.app is app.wsgi_app.__wrapped__
    with pytest.raises(AttributeError, match="no_such_setting"):
        app.wsgi_app.no_such_setting
    with wsgi_server(app) as base:
        import urllib.request
        request = urllib.request.Request(f"{base}/whoami", headers={"X-Forwarded-For": "203.0.113.7"})
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read().decode()
    assert '"addr":"203.0.113.7"' in body.replace(" ", "") and "GET /whoami" in body


def test_the_wsgi_middleware_copies_without_recursing():
    def inner(environ, start_response):
        start_response("204 No Content", [])
        return []
    inner.marker = "inner's own"
    middleware = TxnSafetyMiddleware(inner)
    duplicate = copy.copy(middleware)
    assert duplicate.marker == middleware.marker == "inner's own"
    assert copy.deepcopy(middleware).app is not None


def test_starlette_keeps_its_attributes():
    pytest.importorskip("starlette")
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    def home(request):
        return JSONResponse({"greeting": request.app.state.greeting, "scope": txnsafety.current_scope().name})

    inner = Starlette(routes=[Route("/home", home, name="home")])
    app = TxnSafetyASGIMiddleware(inner)
    app.state.greeting = "hello"                       # the wrapped app's state, through the wrapper
    assert inner.state.greeting == "hello"
    assert app.url_path_for("home") == "/home" and app.routes is inner.routes
    assert app.__wrapped__ is inner
    with pytest.raises(AttributeError, match="no_such_thing"):
        app.no_such_thing
    with asgi_server(app) as base:
        assert get_json(f"{base}/home") == (200, {"greeting": "hello", "scope": "GET /home"})


def test_an_asgi2_app_is_forwarded_to_as_given():
    class LegacyApp:  # ASGI2: a class called with the scope, then awaited with receive/send
        version = "2.0"

        def __init__(self, scope):
            self.scope = scope

        async def __call__(self, receive, send):
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})

    app = TxnSafetyASGIMiddleware(LegacyApp)
    assert app.version == "2.0" and app.__wrapped__ is LegacyApp
