"""A failure of the checker's own code while deciding a request's lock priority never
fails the request: it is logged and the request runs at interactive priority.

The priority is decided when the request's first lock asks for it (default rule) or
when the scope opens (an application's ``priority_rule``).  ``settings.priority_for``
guards the rule and the header; the failure injected here is of that guard itself,
so what is tested is the middleware's own guard around it.  Real servers (wsgiref,
uvicorn), a real lock taken in the request.
"""
from __future__ import annotations

import logging

import pytest

import txnsafety
from fixtures.http_servers import asgi_server, get_json, wsgi_server
from txnsafety.asgi import TxnSafetyASGIMiddleware
from txnsafety.locks import user_write_lock
from txnsafety.wsgi import TxnSafetyMiddleware


def wsgi_app(environ, start_response):
    with user_write_lock(f"priority-{environ['PATH_INFO']}") as lease:
        body = lease.priority.value.encode()
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [body]


async def asgi_app(scope, receive, send):
    if scope["type"] != "http":
        return
    async with user_write_lock(f"priority-{scope['path']}") as lease:
        body = lease.priority.value.encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture
def broken_priority(monkeypatch):
    """The checker's own priority decision fails (a bug of ours, injected)."""
    def fail(path, headers):
        raise RuntimeError("internal failure while deciding the priority")
    monkeypatch.setattr(txnsafety.settings, "priority_for", fail)


@pytest.fixture(params=["default rule", "application rule"])
def rule(request, monkeypatch):
    if request.param == "application rule":  # decided when the scope opens, not at the first lock
        monkeypatch.setattr(txnsafety.settings, "priority_rule", lambda path, headers: "batch")
    return request.param


def _served(kind: str, path: str) -> tuple[int, str]:
    if kind == "wsgi":
        with wsgi_server(TxnSafetyMiddleware(wsgi_app)) as base:
            return get_json(base + path)
    with asgi_server(TxnSafetyASGIMiddleware(asgi_app)) as base:
        return get_json(base + path)


@pytest.mark.parametrize("kind", ["wsgi", "asgi"])
def test_a_failing_priority_decision_is_logged_and_the_request_succeeds(kind, rule, broken_priority, caplog):
    with caplog.at_level(logging.ERROR, "txnsafety"):
        status, body = _served(kind, "/cron/nightly")   # a batch path: what it would have been
    assert (status, body) == (200, "interactive")
    logged = [r for r in caplog.records if "could not decide the lock priority" in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info[0] is RuntimeError


@pytest.mark.parametrize("kind", ["wsgi", "asgi"])
def test_without_a_failure_the_lock_gets_the_decided_priority(kind, rule):
    """The control: the same request, nothing broken, is batch (a batch path, or the rule)."""
    assert _served(kind, "/cron/nightly") == (200, "batch")
