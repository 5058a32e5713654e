"""The WSGI and ASGI middleware under real servers, with real concurrent requests."""
from __future__ import annotations

import asyncio
import gc
import threading
import tracemalloc
from wsgiref.util import setup_testing_defaults

import pytest
from webob import Request

from fixtures.minidb import value_of
from fixtures.wsgi_asgi import points
from fixtures.http_servers import asgi_server, concurrently, get_json, wsgi_server
from txnsafety.asgi import TxnSafetyASGIMiddleware
from txnsafety.context import current_scope
from txnsafety.wsgi import TxnSafetyMiddleware


@pytest.fixture
def store(tmp_path):
    s = points.make_store(str(tmp_path / "points.sqlite3"))
    yield s
    s.close()


@pytest.fixture
def race():
    yield points.RACE
    points.RACE.barrier = None
    points.RACE.abarrier = None


def _points(store):
    return value_of(store, points.Wallet, 1, "points")


# -- the lost update, under a real threaded WSGI server ----------------------------------

def test_wsgi_two_interleaved_requests_lose_an_update_and_both_are_reported(store, race, txnsafety_violations):
    race.barrier = threading.Barrier(2)
    app = TxnSafetyMiddleware(points.wsgi_app(store))
    with wsgi_server(app) as url:
        results = concurrently(2, lambda i: get_json(f"{url}/racy/add?n={10 + i}"))
    assert [status for status, _ in results] == [200, 200]
    assert _points(store) in (10, 11), "one of the two writes must have been lost"
    bodies = [body for _, body in results]
    # each request saw exactly its own violation, tagged with its own request id
    for body in bodies:
        assert body["violations"] == ["TXN102"]
        assert body["violation_requests"] == [body["request_id"]]
    assert bodies[0]["request_id"] != bodies[1]["request_id"]
    assert sorted(txnsafety_violations.codes()) == ["TXN102", "TXN102"]


def test_wsgi_fixed_twin_loses_nothing_and_reports_nothing(store, txnsafety_violations):
    app = TxnSafetyMiddleware(points.wsgi_app(store))
    with wsgi_server(app) as url:
        results = concurrently(8, lambda i: [get_json(f"{url}/fixed/add?n=1") for _ in range(5)])
    assert all(status == 200 for batch in results for status, _ in batch)
    assert _points(store) == 40
    assert txnsafety_violations == []


# -- the same under uvicorn (ASGI), with sync_to_async hops -----------------------------

def test_asgi_two_interleaved_requests_lose_an_update_and_both_are_reported(store, race, txnsafety_violations):
    race.abarrier = asyncio.Barrier(2)
    app = TxnSafetyASGIMiddleware(points.asgi_app(store))
    with asgi_server(app) as url:
        results = concurrently(2, lambda i: get_json(f"{url}/racy/add?n={10 + i}"))
    assert [status for status, _ in results] == [200, 200]
    assert _points(store) in (10, 11)
    bodies = [body for _, body in results]
    for body in bodies:
        assert body["violations"] == ["TXN102"]
        assert body["violation_requests"] == [body["request_id"]]
    assert bodies[0]["request_id"] != bodies[1]["request_id"]
    # the reads and writes ran in sync_to_async threads; the sites are the awaiting lines
    for violation in txnsafety_violations:
        assert violation.read_site.file == points.__file__ and violation.read_site.function == "app"
        assert violation.write_site.line > violation.read_site.line


def test_asgi_fixed_twin_loses_nothing(store, txnsafety_violations):
    app = TxnSafetyASGIMiddleware(points.asgi_app(store))
    with asgi_server(app) as url:
        concurrently(6, lambda i: [get_json(f"{url}/fixed/add?n=1") for _ in range(5)])
    assert _points(store) == 30
    assert txnsafety_violations == []


def test_asgi_child_task_shares_the_request_scope():
    seen = {}

    async def app(scope, receive, send):
        async def child():
            seen["child"] = current_scope()
        await asyncio.create_task(child())
        seen["handler"] = current_scope()
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    sent = []

    async def run():
        async def receive():
            return {"type": "http.request", "body": b""}

        async def send(message):
            sent.append(message)
        await TxnSafetyASGIMiddleware(app)({"type": "http", "path": "/x", "headers": []}, receive, send)

    asyncio.run(run())
    assert seen["child"] is seen["handler"] is not None
    assert sent[0]["status"] == 204


# -- streaming, errors, malformed input ------------------------------------------------------

def test_wsgi_streaming_body_is_still_checked_while_it_streams(store, txnsafety_violations):
    app = TxnSafetyMiddleware(points.wsgi_app(store))
    with wsgi_server(app) as url:
        status, body = get_json(f"{url}/stream?n=1")
    assert status == 200
    assert '"violations": ["TXN102"]' in body
    assert txnsafety_violations.codes() == ["TXN102"]


def test_wsgi_scope_closed_when_the_app_raises(store):
    app = TxnSafetyMiddleware(points.wsgi_app(store))
    environ = {}
    setup_testing_defaults(environ)
    environ["PATH_INFO"] = "/boom"
    outer = current_scope()
    with pytest.raises(RuntimeError, match="application failed"):
        app(environ, lambda *a: None)
    assert current_scope() is outer


def test_wsgi_malformed_environ_runs_unchecked_without_crash(store, caplog):
    """An environ webob cannot read: logged, the request still runs, nothing leaks."""
    seen = []

    def inner(environ, start_response):
        seen.append(current_scope())
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]

    outer = current_scope()
    body = TxnSafetyMiddleware(inner)({"REQUEST_METHOD": "GET", "wsgi.url_scheme": "http",
                                       "HTTP_HOST": "x", "PATH_INFO": 42}, lambda *a: None)
    assert list(body) == [b"ok"]
    assert seen == [outer]
    assert "runs unchecked" in caplog.text
    assert current_scope() is outer


def test_asgi_malformed_scope_and_non_http_scopes_pass_through(caplog):
    calls = []

    async def inner(scope, receive, send):
        calls.append((scope["type"], current_scope()))

    async def run():
        mw = TxnSafetyASGIMiddleware(inner)
        await mw({"type": "lifespan"}, None, None)
        await mw({"type": "websocket", "path": "/ws"}, None, None)
        await mw({"type": "http", "path": b"/bytes-not-str", "headers": []}, None, None)
        await mw({"type": "http", "path": "/ok", "headers": [(b"x-a", b"1")]}, None, None)

    outer = current_scope()  # the pytest plugin's per-test scope
    asyncio.run(run())
    assert [c[0] for c in calls] == ["lifespan", "websocket", "http", "http"]
    assert calls[0][1] is outer and calls[1][1] is outer and calls[2][1] is outer
    assert calls[3][1] not in (None, outer)
    assert "runs unchecked" in caplog.text


def test_wrapping_a_non_callable_is_a_clear_error():
    with pytest.raises(TypeError, match="WSGI callable"):
        TxnSafetyMiddleware(None)
    with pytest.raises(TypeError, match="ASGI application"):
        TxnSafetyASGIMiddleware("app")


def test_batch_priority_from_path_and_header():
    seen = []

    def inner(environ, start_response):
        seen.append(current_scope().priority)
        start_response("200 OK", [])
        return [b""]

    app = TxnSafetyMiddleware(inner)
    for path, headers in (("/cron/daily", {}), ("/home", {}), ("/home", {"X-Txnsafety-Priority": "batch"})):
        list(Request.blank(path, headers=headers).call_application(app)[2])
    assert [p.value for p in seen] == ["batch", "interactive", "batch"]


# -- no state survives a request ---------------------------------------------------------

def test_a_thousand_requests_leave_no_state_behind(store, txnsafety_violations):
    """Measured: scopes are collected, and memory does not grow with request count."""
    import weakref

    scopes = weakref.WeakSet()

    def inner(environ, start_response):
        scope = current_scope()
        scopes.add(scope)
        points.fixed_add(store, 1)     # stamps reads, records writes
        start_response("200 OK", [])
        return [b"ok"]

    app = TxnSafetyMiddleware(inner)
    outer = current_scope()

    def burst(n):
        for _ in range(n):
            body = Request.blank("/x").call_application(app)[2]
            list(body)
            if hasattr(body, "close"):   # PEP 3333: a made body is returned as it is, a list
                body.close()

    burst(100)  # warm caches
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    burst(1000)
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename")
                if "txnsafety" in (stat.traceback[0].filename if stat.traceback else ""))
    assert len(scopes) == 0, f"{len(scopes)} request scopes still alive"
    assert grown < 64 * 1024, f"txnsafety kept {grown} bytes after 1,000 requests"
    assert current_scope() is outer
    assert txnsafety_violations == []
    assert _points(store) == 1100


def test_wsgi_scope_ends_when_the_body_is_exhausted_even_unclosed(store, txnsafety_violations):
    """Werkzeug's test client does not close the response it returns: the scope must end
    with the body, so what the test does afterwards is not judged as part of the request."""
    from werkzeug.test import Client

    seen = []

    def app(environ, start_response):
        seen.append(current_scope())
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]

    outer = current_scope()
    response = Client(TxnSafetyMiddleware(app)).post("/x")
    assert response.data == b"ok"
    assert seen[0] is not outer and seen[0].name == "POST /x"
    assert current_scope() is outer                  # before the test closes anything
    response.close()
    assert current_scope() is outer
