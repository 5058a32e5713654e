"""The lock priority of a request never fails it: a missing, empty or malformed priority
header, or a priority rule that raises, is logged and the request runs as interactive.

Real WSGI (webob) and ASGI middleware; the application reads its scope's priority the
way a lock does when it queues.
"""
from __future__ import annotations

import asyncio
import logging

import pytest
from webob import Request

import txnsafety
from txnsafety.asgi import TxnSafetyASGIMiddleware
from txnsafety.context import Priority
from txnsafety.wsgi import TxnSafetyMiddleware


def wsgi_app(environ, start_response):
    priority = txnsafety.current_scope().priority
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [priority.value.encode()]


async def asgi_app(scope, receive, send):
    priority = txnsafety.current_scope().priority
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": priority.value.encode()})


def via_wsgi(path: str, headers: dict[str, str]) -> tuple[int, str]:
    response = Request.blank(path, headers=headers).get_response(TxnSafetyMiddleware(wsgi_app))
    return response.status_code, response.text


def via_asgi(path: str, headers: list[tuple[bytes, bytes]]) -> tuple[int, str]:
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": path, "headers": headers, "query_string": b""}
    asyncio.run(TxnSafetyASGIMiddleware(asgi_app)(scope, receive, send))
    return sent[0]["status"], sent[1]["body"].decode()


@pytest.fixture
def rule():
    previous = txnsafety.settings.priority_rule
    yield lambda fn: txnsafety.configure(priority_rule=fn)
    txnsafety.settings.priority_rule = previous


@pytest.mark.parametrize("headers, expected", [
    ({}, "interactive"), ({"X-Txnsafety-Priority": ""}, "interactive"),
    ({"X-Txnsafety-Priority": " BATCH "}, "batch"), ({"X-Txnsafety-Priority": "urgent!!"}, "interactive"),
    ({"X-Txnsafety-Priority": "\u00e9\u00e9"}, "interactive"),
])
def test_the_default_rule_never_fails_a_request(headers, expected):
    assert via_wsgi("/orders", headers) == (200, expected)
    raw = [(k.lower().encode(), v.encode("latin-1")) for k, v in headers.items()]
    assert via_asgi("/orders", raw) == (200, expected)


def test_a_missing_header_value_is_interactive():
    assert txnsafety.settings.priority_for("/x", {"x-txnsafety-priority": None}) is Priority.INTERACTIVE
    assert txnsafety.settings.priority_for("/cron/x", {"x-txnsafety-priority": None}) is Priority.BATCH


def test_a_rule_that_raises_is_logged_and_the_request_runs(rule, caplog):
    def broken(path, headers):
        return {"/a": Priority.BATCH}[path]  # KeyError for any other path
    rule(broken)
    with caplog.at_level(logging.ERROR, "txnsafety"):
        assert via_wsgi("/a", {}) == (200, "batch")
        assert via_wsgi("/b", {}) == (200, "interactive")
        assert via_asgi("/b", []) == (200, "interactive")
    failures = [r for r in caplog.records if "priority rule failed" in r.getMessage()]
    assert len(failures) == 2 and all(r.exc_info[0] is KeyError for r in failures)


@pytest.mark.parametrize("returned, expected", [(None, "interactive"), ("batch", "batch"),
                                                (42, "interactive"), (Priority.BATCH, "batch")])
def test_a_rule_returning_something_else_is_logged(rule, caplog, returned, expected):
    rule(lambda path, headers: returned)
    with caplog.at_level(logging.WARNING, "txnsafety"):
        assert via_wsgi("/a", {}) == (200, expected)
    logged = [r for r in caplog.records if "not a priority" in r.getMessage()]
    assert len(logged) == (1 if expected == "interactive" else 0)
