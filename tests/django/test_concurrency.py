"""The concurrency proof: N real requests hammer a counter on PostgreSQL through a real WSGI server.

A ``threading.Barrier`` inside the view makes the interleaving deterministic: in
the racy variants every request reads the counter before any of them writes, so
exactly N-1 increments are lost — and the checker reports every request.  The
fixed variants lose nothing and report nothing.
"""
from __future__ import annotations

import threading

import pytest
from django.core.wsgi import get_wsgi_application

from fixtures.django_app.models import Counter, VersionedCounter
from fixtures.http_servers import concurrently, get_json, wsgi_server

from .conftest import assert_each_request_reported

N = 6

#: variant -> (database alias, where the barrier sits, expected lost updates, expected codes per request)
VARIANTS = {
    "racy": ("pg", "after_read", N - 1, "TXN102"),
    "racy_atomic": ("pg", "after_read", N - 1, "TXN109"),
    "for_update": ("pg", "before_read", 0, None),
    "f": ("pg", "before_read", 0, None),
    "versioned": ("pg", "after_read", 0, None),
    "serializable": ("pg_rr", "after_read", 0, None),
    "user_lock": ("pg", "before_read", 0, None),
}


@pytest.fixture(scope="module")
def server_url():
    with wsgi_server(get_wsgi_application()) as url:
        yield url


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_counter_under_concurrent_requests(variant, pg_db, server_url, interleave, txnsafety_violations):
    alias, point, expected_lost, code = VARIANTS[variant]
    if variant == "user_lock":
        pytest.importorskip("txnsafety.locks")
    model = VersionedCounter if variant == "versioned" else Counter
    barrier = threading.Barrier(N, timeout=30)   # the timeout only turns a bug into a failure, not a hang
    interleave["fn"] = lambda at: barrier.wait() if at == point else None

    results = concurrently(N, lambda i: get_json(f"{server_url}/{alias}/counter/{variant}/1/"))

    assert [status for status, _ in results] == [200] * N, results
    final = model.objects.using("pg").get(pk=1).value
    lost = N - final
    assert lost == expected_lost
    assert_each_request_reported(txnsafety_violations, code, N, variant)
    if code is not None:
        assert {v.model for v in txnsafety_violations} == {"django_app.Counter"}
        assert {v.read_site.function for v in txnsafety_violations} == {f"counter_{variant}"}
    if variant in ("versioned", "serializable"):
        # the losers of the race really did conflict and retry
        assert sum(body["attempts"] for _, body in results) > N
