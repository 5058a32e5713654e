"""The concurrency proof: N concurrent requests increment one counter on PostgreSQL.

The Flask-SQLAlchemy app runs under waitress with N worker threads; N client
threads POST at once.  A ``threading.Barrier`` inside the handler makes the
interleaving deterministic: in the racy version every request has read the
counter before any of them writes, so exactly N-1 increments are lost at READ
COMMITTED, and the checker reports every one of the N read-modify-writes
(TXN109).  The fixed versions (FOR UPDATE, ``Counter.n + 1`` in the database,
``version_id_col`` with retry, the user write lock) lose none and report nothing.
"""
from __future__ import annotations

import threading

import httpx
import pytest

from .conftest import Served, reset_rows, serve_wsgi, stop_wsgi

N = 8
MODEL = {"racy": "Counter", "for_update": "Counter", "atomic": "Counter",
         "versioned": "VersionedCounter", "user_lock": "LockedCounter"}


@pytest.fixture(scope="module")
def counter_app(pg_url):
    from fixtures.sqla_app.flask_app import create_app
    reset_rows(pg_url)
    app = create_app(pg_url, pool_size=N + 2)
    server, base = serve_wsgi(app, threads=N + 2)
    served = Served(base, pg_url, app)
    yield served
    served.client.close()
    stop_wsgi(server)
    app.extensions["sqla_stack"].dispose()
    with app.app_context():
        app.extensions["sqlalchemy"].engines[None].dispose()


def hammer(served: Served, variant: str) -> list[httpx.Response]:
    """N concurrent POST /counter/<variant>; returns the responses."""
    reset_rows(served.url)
    served.app.config["TXNSAFETY_BARRIER"] = threading.Barrier(N)
    responses: list[httpx.Response] = []
    lock = threading.Lock()

    def one() -> None:
        with httpx.Client(base_url=served.base_url, timeout=60) as client:
            response = client.post(f"/counter/{variant}")
        with lock:
            responses.append(response)

    threads = [threading.Thread(target=one) for _ in range(N)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    finally:
        served.app.config["TXNSAFETY_BARRIER"] = None
    assert len(responses) == N
    return responses


def test_racy_counter_loses_updates_and_every_request_is_reported(counter_app, txnsafety_violations):
    responses = hammer(counter_app, "racy")
    assert [r.status_code for r in responses] == [200] * N
    final = counter_app.value("Counter")["n"]
    lost = N - final
    assert lost == N - 1, f"{lost} of {N} increments lost"
    assert txnsafety_violations.codes() == ["TXN109"] * N
    assert {v.request_id for v in txnsafety_violations} and len({v.request_id for v in txnsafety_violations}) == N


@pytest.mark.parametrize("variant", ["for_update", "atomic", "versioned", "user_lock"])
def test_fixed_counter_loses_nothing_and_reports_nothing(counter_app, variant, txnsafety_violations):
    responses = hammer(counter_app, variant)
    assert [r.status_code for r in responses] == [200] * N, [r.text for r in responses]
    assert counter_app.value(MODEL[variant])["n"] == N
    assert txnsafety_violations == []
    if variant == "versioned":   # the conflicts happened and were retried, not lost
        assert sum(r.json()["attempts"] for r in responses) > N
