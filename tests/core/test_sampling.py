"""``sample_rate``: the share of requests the checker checks (sentry-sdk's
``traces_sample_rate``), so production can keep it on at a fraction of the cost; and
``sampler`` (sentry-sdk's ``traces_sampler``), which decides that share per request from
its method, path and headers.

A request the sample leaves out runs as if the checker were off: its lost update happens
and nobody reports it, while the same pair of requests checked is reported. Its locks are
untouched: they still take their priority from the request and are released when the
request ends. A bad rate or sampler is an error that names the setting; a sampler that
fails or answers nonsense at run time is logged, and the request is sampled at
``sample_rate`` (never a silent off switch).
"""
from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path

import pytest
from webob import Request

import txnsafety
from fixtures.minidb import value_of
from fixtures.wsgi_asgi import points
from fixtures.http_servers import asgi_server, concurrently, get_json, wsgi_server
from txnsafety.asgi import TxnSafetyASGIMiddleware
from txnsafety.config import ConfigurationError, settings
from txnsafety.context import current_scope, request_of_locks
from txnsafety.locks import user_write_lock
from txnsafety.wsgi import TxnSafetyMiddleware


@pytest.fixture
def sample_rate():
    def set_rate(rate: float) -> None:
        txnsafety.configure(sample_rate=rate)
    yield set_rate
    txnsafety.configure(sample_rate=1.0)


@pytest.fixture
def sampler():
    def set_sampler(fn) -> None:
        txnsafety.configure(sampler=fn)
    yield set_sampler
    settings.sampler = None  # configure() keeps a sampler when given None


@pytest.fixture
def store(tmp_path):
    s = points.make_store(str(tmp_path / "points.sqlite3"))
    yield s
    s.close()


def _racy_pair(store) -> list[dict]:
    before = value_of(store, points.Wallet, 1, "points")
    points.RACE.barrier = threading.Barrier(2)
    try:
        with wsgi_server(TxnSafetyMiddleware(points.wsgi_app(store))) as url:
            results = concurrently(2, lambda i: get_json(f"{url}/racy/add?n={10 + i}"))
    finally:
        points.RACE.barrier = None
    assert value_of(store, points.Wallet, 1, "points") - before in (10, 11), "one of the two writes is lost"
    return [body for _, body in results]


def test_a_request_left_out_loses_its_update_unreported_and_a_checked_one_is_reported(
        store, sample_rate, txnsafety_violations):
    sample_rate(0.0)
    assert [body["violations"] for body in _racy_pair(store)] == [[], []]
    assert txnsafety_violations == []
    sample_rate(1.0)
    assert [body["violations"] for body in _racy_pair(store)] == [["TXN102"], ["TXN102"]]


def test_under_asgi_too_a_request_left_out_is_not_checked(store, sample_rate, txnsafety_violations):
    sample_rate(0.0)
    points.RACE.abarrier = asyncio.Barrier(2)
    try:
        with asgi_server(TxnSafetyASGIMiddleware(points.asgi_app(store))) as url:
            results = concurrently(2, lambda i: get_json(f"{url}/racy/add?n={10 + i}"))
    finally:
        points.RACE.abarrier = None
    assert [status for status, _ in results] == [200, 200]
    assert value_of(store, points.Wallet, 1, "points") in (10, 11), "one of the two writes is lost"
    assert [body["violations"] for _, body in results] == [[], []]
    assert txnsafety_violations == []


def _recording(checked: list[bool]) -> TxnSafetyMiddleware:
    """A WSGI app behind the middleware that appends, per request, whether the checker saw it."""
    def inner(environ, start_response):
        checked.append(current_scope() is not None)
        start_response("200 OK", [])
        return [b""]
    return TxnSafetyMiddleware(inner)


def test_the_rate_is_the_share_of_requests_checked(sample_rate):
    checked: list[bool] = []
    app = _recording(checked)
    sample_rate(0.25)
    outside = current_scope()          # the pytest plugin's scope of this test
    for _ in range(400):
        list(Request.blank("/").call_application(app)[2])
    # binomial(400, 0.25): mean 100, sd 8.7; the bounds are 4.6 sd away
    assert 60 <= sum(checked) <= 140
    assert current_scope() is outside  # each request put back what it replaced


def test_a_request_left_out_keeps_its_locks_priority_and_their_release_at_its_end(sample_rate):
    leases = []

    def inner(environ, start_response):
        lease = user_write_lock(f"sampling-{environ['PATH_INFO']}").__enter__()   # never exited
        leases.append(lease)
        start_response("200 OK", [])
        return [b""]

    sample_rate(0.0)
    app = TxnSafetyMiddleware(inner)
    list(Request.blank("/tasks/nightly").call_application(app)[2])
    lease = leases[0]
    assert lease.priority.value == "batch"                 # from the request's path
    assert lease.owner.request_id is not None
    assert not lease.is_live(), "the request's end released the lock it still held"
    with user_write_lock("sampling-/tasks/nightly", wait_timeout=1):
        pass


def test_a_request_left_out_has_a_scope_of_its_own_for_locks_whose_cleanups_all_run_at_its_end(sample_rate, caplog):
    """The left-out request's scope (what its locks see) is the request's, not the test's around
    it; it keeps nothing for the checker, and closing it runs every cleanup, one failing or not."""
    seen, ran = [], []

    def inner(environ, start_response):
        scope = request_of_locks()
        seen.append((current_scope(), scope, scope.name))
        scope.add_cleanup(lambda: ran.append("first"))
        scope.add_cleanup(lambda: 1 / 0)                  # logged, the others still run
        scope.add_cleanup(lambda: ran.append("last"))
        start_response("200 OK", [])
        return [b""]

    sample_rate(0.0)
    outside = current_scope()
    with caplog.at_level(logging.ERROR, logger="txnsafety"):
        list(Request.blank("/orders/7").call_application(TxnSafetyMiddleware(inner))[2])
    (checked_scope, scope, name), = seen
    assert checked_scope is None and scope is not outside and name == "GET /orders/7"
    assert not hasattr(scope, "stamps"), "the checker never sees a left-out request: it keeps nothing for it"
    assert ran == ["last", "first"]                       # last registered first, as a checked scope's
    assert "cleanup failed" in caplog.text
    assert request_of_locks() is outside and current_scope() is outside


@pytest.mark.parametrize("bad", [-0.1, 1.5, "0.5", True, float("nan")])
def test_a_rate_outside_zero_to_one_is_an_error_naming_the_setting(bad):
    with pytest.raises(ConfigurationError, match="sample_rate"):
        txnsafety.configure(sample_rate=bad)
    assert settings.sample_rate == 1.0


def test_the_sampler_decides_per_request_from_method_path_and_headers(store, sampler, sample_rate,
                                                                      txnsafety_violations):
    seen = []

    def by_path(method, path, headers):
        seen.append((method, path))
        return 0.0 if path.startswith("/racy/") else 1.0   # the hot endpoint left out
    sampler(by_path)
    assert [body["violations"] for body in _racy_pair(store)] == [[], []]
    assert seen == [("GET", "/racy/add")] * 2 and txnsafety_violations == []
    sampler(lambda method, path, headers: path.startswith("/racy/"))   # True: checked, over sample_rate 0
    sample_rate(0.0)
    assert [body["violations"] for body in _racy_pair(store)] == [["TXN102"], ["TXN102"]]


def test_a_sampler_answering_none_leaves_the_request_to_sample_rate(sampler, sample_rate):
    checked: list[bool] = []
    app = _recording(checked)
    sampler(lambda method, path, headers: 1.0 if headers.get("x-check") else None)
    sample_rate(0.0)
    list(Request.blank("/a").call_application(app)[2])
    list(Request.blank("/a", headers={"X-Check": "1"}).call_application(app)[2])
    assert checked == [False, True]


@pytest.mark.parametrize("answer", [1.5, -1, "1", float("nan"), ValueError("boom")])
def test_a_sampler_that_fails_is_logged_and_the_request_sampled_at_sample_rate(answer, sampler, sample_rate,
                                                                               caplog):
    checked: list[bool] = []
    app = _recording(checked)

    def broken(method, path, headers):
        if isinstance(answer, Exception):
            raise answer
        return answer
    sampler(broken)
    for rate in (1.0, 0.0):
        sample_rate(rate)
        with caplog.at_level(logging.ERROR, logger="txnsafety"):
            status, _, body = Request.blank("/orders/7").call_application(app)
            list(body)
        assert status == "200 OK"
    assert checked == [True, False]
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    # the first failure is logged, then one in a thousand: not one Sentry event per request
    assert len(errors) == 1 and "sampler" in errors[0] and "/orders/7" in errors[0], errors


def test_a_failing_sampler_is_logged_on_its_first_and_every_thousandth_failure(sampler, caplog):
    def broken(method, path, headers):
        raise KeyError(path)
    sampler(broken)
    with caplog.at_level(logging.ERROR, logger="txnsafety"):
        rates = [settings.rate_for("GET", f"/n/{i}", {}) for i in range(2001)]
    assert rates == [settings.sample_rate] * 2001
    logged = [r.getMessage() for r in caplog.records if "sampler" in r.getMessage()]
    assert len(logged) == 3 and "(1001 failure(s) so far)" in logged[1], logged


def _priority_rule_shaped(path, headers):
    return 1.0


@pytest.mark.parametrize("bad", [0.5, "by_path", object(), _priority_rule_shaped, lambda method: 1.0])
def test_a_sampler_that_cannot_be_called_with_method_path_headers_is_an_error_naming_the_setting(bad):
    with pytest.raises(ConfigurationError, match="sampler"):
        txnsafety.configure(sampler=bad)
    assert settings.sampler is None


def test_under_asgi_the_sampler_reads_the_request_headers(sampler, sample_rate):
    checked = []

    async def inner(scope, receive, send):
        checked.append(current_scope() is not None)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def serve(headers):
        sent = []

        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message):
            sent.append(message)
        await TxnSafetyASGIMiddleware(inner)({"type": "http", "method": "GET", "path": "/a", "headers": headers},
                                             receive, send)
        return sent[0]["status"]

    sampler(lambda method, path, headers: 1.0 if headers.get("x-check") == "1" else None)
    sample_rate(0.0)
    assert asyncio.run(serve([])) == 200 and asyncio.run(serve([(b"x-check", b"1")])) == 200
    assert checked == [False, True]


def test_the_sampler_of_the_django_docs_runs_as_written(sampler):
    doc = (Path(__file__).resolve().parents[2] / "docs" / "django.md").read_text()
    block = next(b for b in doc.split("```python\n")[1:] if b.startswith("def sampler("))
    namespace: dict = {}
    exec(block.split("```")[0], namespace)
    documented = namespace["sampler"]
    sampler(documented)
    assert settings.rate_for("GET", "/api/feed/7", {}) == 0.01
    assert settings.rate_for("POST", "/orders/", {"x-staff": "1"}) == 1.0
    assert settings.rate_for("GET", "/orders/", {}) == settings.sample_rate


def test_without_a_sampler_the_rate_is_sample_rate(sample_rate):
    sample_rate(0.3)
    assert settings.sampler is None and settings.rate_for("GET", "/", {}) == 0.3
