"""Stalls are bounded: a backend that stops answering (no reset) costs a socket timeout.

The proxy stops forwarding in both directions and keeps every socket open, as a
dead switch or a paused server would.  Acquire must return within its wait
timeout plus one connect/socket timeout, release within one socket timeout, and
no TXN104 may be reported for a lease that had not ended.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

from tests.faults.conftest import through
from txnsafety.locks import BackendUnavailable, LockTimeout, backend_from_url, global_lock
from txnsafety.report import add_listener, remove_listener

#: per backend: the URL option that sets its socket timeout, and the value used here
#: (PostgreSQL's connect timeout cannot go below 2 s: libpq's rule)
TIMEOUT = {"redis": 1.0, "memcached": 1.0, "postgresql": 2.0, "postgresql-xact": 2.0}
SLACK = 0.75      # scheduling on 2 shared cores


def _url(kind: str, url: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}timeout={TIMEOUT[kind]:g}"


def test_acquire_against_a_stalled_backend_is_bounded(shared, key: str) -> None:
    kind, url, proxy = shared
    backend = backend_from_url(_url(kind, through(proxy, url)))
    wait = 1.0
    try:
        proxy.stall()
        t0 = time.monotonic()
        with pytest.raises(BackendUnavailable):
            with global_lock(key, backend=backend, lease=30, wait_timeout=wait):
                pass
        took = time.monotonic() - t0
    finally:
        proxy.resume()
        backend.close()
    assert took < wait + TIMEOUT[kind] + SLACK, took


def test_waiting_acquire_stalled_midway_is_bounded(shared, key: str) -> None:
    kind, url, proxy = shared
    backend = backend_from_url(_url(kind, through(proxy, url)))
    wait = 1.5
    try:
        with global_lock(key, backend=url, lease=30):        # held directly: the proxied one waits
            outcome: list[object] = []

            def waiter() -> None:
                t0 = time.monotonic()
                try:
                    with global_lock(key, backend=backend, lease=30, wait_timeout=wait, priority="interactive"):
                        outcome.append("acquired")
                except (LockTimeout, BackendUnavailable) as exc:
                    outcome.append(type(exc).__name__)
                outcome.append(time.monotonic() - t0)
            t = threading.Thread(target=waiter)
            t.start()
            _until_queued(kind, backend, key)
            proxy.stall()
            t.join(30)
    finally:
        proxy.resume()
        backend.close()
    assert outcome and outcome[0] in ("LockTimeout", "BackendUnavailable"), outcome
    assert outcome[1] < wait + TIMEOUT[kind] + SLACK, outcome


def _until_queued(kind: str, backend, key: str) -> None:  # noqa: ANN001
    """Until the proxied waiter is really waiting for ``key`` (as its backend tells)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if kind == "redis":
            waiting = backend.client.zcard(backend.keys_for(key)[0][2])
        else:  # PostgreSQL: sessions queued on the server; memcached: this process's waiters
            waiting = backend.waiting(key)
        if waiting:
            return
        time.sleep(0.01)
    raise AssertionError("the waiter never queued")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_release_against_a_stalled_backend_is_bounded_and_no_stomp(
        shared, key: str, mode: str, caplog: pytest.LogCaptureFixture) -> None:  # noqa: ANN001
    kind, url, proxy = shared
    backend = backend_from_url(_url(kind, through(proxy, url)))
    violations: list = []
    add_listener(violations.append)
    took: list[float] = []

    async def async_section() -> None:
        async with global_lock(key, backend=backend, lease=30):
            proxy.stall()
            took.append(time.monotonic())
        took.append(time.monotonic())

    try:
        with caplog.at_level(logging.WARNING, logger="txnsafety.locks"):
            if mode == "sync":
                with global_lock(key, backend=backend, lease=30):
                    proxy.stall()
                    took.append(time.monotonic())
                took.append(time.monotonic())
            else:
                asyncio.run(async_section())
    finally:
        remove_listener(violations.append)
        proxy.resume()
        proxy.cut()
        backend.close()
    assert took[1] - took[0] < TIMEOUT[kind] + SLACK, took[1] - took[0]
    assert [v.code.value for v in violations] == []
    assert any("in doubt" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("kind", ["redis", "memcached"])
def test_a_stall_shorter_than_the_lease_does_not_lose_a_renewed_lease(
        kind: str, request: pytest.FixtureRequest, make_proxy, key: str) -> None:  # noqa: ANN001
    """Renewals that time out during a stall are retried while the lease lasts: the
    lease never ended, so no LOST state and no TXN104."""
    from urllib.parse import urlsplit

    from txnsafety.locks import LeaseState
    base = request.getfixturevalue(f"{kind}_url")
    parts = urlsplit(base)
    proxy = make_proxy(parts.hostname, parts.port)
    backend = backend_from_url(_url(kind, through(proxy, base)) + f"&prefix=r{key}")
    violations: list = []
    add_listener(violations.append)
    try:
        with global_lock(key, backend=backend, lease=4, renew=0.3) as lease:
            proxy.stall()
            time.sleep(TIMEOUT[kind] + 0.8)      # at least one renewal times out meanwhile
            proxy.resume()
            time.sleep(0.8)                      # and the next ones succeed
            assert lease.state is LeaseState.HELD
            lease.ensure_held(check_backend=True)
    finally:
        remove_listener(violations.append)
        proxy.resume()
        backend.close()
    assert violations == []
