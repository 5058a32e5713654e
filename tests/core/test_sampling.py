"""``sample_rate``: the share of requests the checker checks (sentry-sdk's
``traces_sample_rate``), so production can keep it on at a fraction of the cost.

A request the sample leaves out runs as if the checker were off: its lost update happens
and nobody reports it, while the same pair of requests checked is reported. Its locks are
untouched: they still take their priority from the request and are released when the
request ends. A bad rate is an error that names the setting.
"""
from __future__ import annotations

import asyncio
import threading

import pytest
from webob import Request

import txnsafety
from fixtures.minidb import value_of
from fixtures.wsgi_asgi import points
from fixtures.http_servers import asgi_server, concurrently, get_json, wsgi_server
from txnsafety.asgi import TxnSafetyASGIMiddleware
from txnsafety.config import ConfigurationError, settings
from txnsafety.context import current_scope
from txnsafety.locks import user_write_lock
from txnsafety.wsgi import TxnSafetyMiddleware


@pytest.fixture
def sample_rate():
    def set_rate(rate: float) -> None:
        txnsafety.configure(sample_rate=rate)
    yield set_rate
    txnsafety.configure(sample_rate=1.0)


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


def test_the_rate_is_the_share_of_requests_checked(sample_rate):
    checked = []

    def inner(environ, start_response):
        checked.append(current_scope() is not None)
        start_response("200 OK", [])
        return [b""]

    app = TxnSafetyMiddleware(inner)
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


@pytest.mark.parametrize("bad", [-0.1, 1.5, "0.5", True, float("nan")])
def test_a_rate_outside_zero_to_one_is_an_error_naming_the_setting(bad):
    with pytest.raises(ConfigurationError, match="sample_rate"):
        txnsafety.configure(sample_rate=bad)
    assert settings.sample_rate == 1.0
