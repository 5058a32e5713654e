"""A release whose reply is lost is in doubt, not a stomp.

The server ran the release (or, for PostgreSQL, the session ended with the
connection, which releases too); only the reply never arrived.  The section's
work was done while the lease was held, so nothing may be raised that makes a
caller redo it: the release is reported as in doubt, with no TXN104.
"""
from __future__ import annotations

import logging

import pytest

from tests.faults.conftest import through
from txnsafety.locks import get_backend, global_lock
from txnsafety.report import add_listener, remove_listener


def _release_request(kind: str, backend, key: str):  # noqa: ANN001, ANN202
    if kind == "redis":
        sha = backend._s_release.sha.encode()
        return lambda data: sha in data
    if kind == "memcached":
        md = f"md {backend.safe_key(key)} C".encode()
        return lambda data: md in data
    if kind == "postgresql":
        return lambda data: b"pg_advisory_unlock(" in data and b"pg_notify" in data
    return lambda data: b"COMMIT" in data


def test_lost_release_reply_is_reported_in_doubt_not_raised(shared, key: str,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    kind, url, proxy = shared
    proxied = get_backend(through(proxy, url))
    violations: list = []
    add_listener(violations.append)
    work: list[str] = []
    try:
        with caplog.at_level(logging.WARNING, logger="txnsafety.locks"):
            with global_lock(key, backend=proxied, lease=30) as lease:
                proxy.lose_reply(_release_request(kind, proxied, key))
                lease.ensure_held()
                work.append("committed")
    finally:
        remove_listener(violations.append)
    assert proxy.faulted.is_set(), "the release's reply was never lost"
    assert work == ["committed"]
    assert [v.code.value for v in violations] == []
    doubt = [r.getMessage() for r in caplog.records if "in doubt" in r.getMessage()]
    assert doubt and "work is done" in doubt[0], [r.getMessage() for r in caplog.records]
    # the release did happen: the lock is free now
    with global_lock(key, backend=url, lease=5, wait_timeout=5):
        pass


@pytest.mark.parametrize("kind", ["redis", "memcached"])
def test_lost_acquire_reply_gives_the_lock_back(kind: str, request: pytest.FixtureRequest, make_proxy,
                                                key: str) -> None:  # noqa: ANN001
    """The acquire ran and granted the lock, its reply was lost: the caller gets an
    error, and the lock must not stay taken by nobody until its lease ends."""
    from urllib.parse import urlsplit

    from txnsafety.locks import BackendUnavailable
    base = request.getfixturevalue(f"{kind}_url")
    url = f"{base}{'&' if '?' in base else '?'}prefix=f{key}"
    parts = urlsplit(url)
    proxy = make_proxy(parts.hostname, parts.port)
    proxied = get_backend(through(proxy, url))
    if kind == "redis":
        sha = proxied._s_acquire.sha.encode()
        proxy.lose_reply(lambda data: sha in data)
    else:
        proxy.lose_reply(lambda data: b" ME " in data)
    with pytest.raises(BackendUnavailable):
        with global_lock(key, backend=proxied, lease=60, wait_timeout=0):
            pass
    assert proxy.faulted.is_set()
    proxied.join_give_backs(10)
    with global_lock(key, backend=url, lease=5, wait_timeout=0):   # free at once, not in 60 s
        pass


def test_memcached_extend_whose_reply_was_lost_does_not_fake_a_lost_lease(
        memcached_url: str, make_proxy, key: str) -> None:  # noqa: ANN001
    """The extend ran (new CAS), its reply never came: the lease's remembered CAS is
    stale.  Release and the next extend must still recognise the item by its token."""
    from urllib.parse import urlsplit

    from txnsafety.locks import BackendUnavailable
    parts = urlsplit(memcached_url)
    proxy = make_proxy(parts.hostname, parts.port)
    proxied = get_backend(through(proxy, f"{memcached_url}?prefix=x{key}"))
    mkey = proxied.safe_key(key)
    violations: list = []
    add_listener(violations.append)
    try:
        with global_lock(key, backend=proxied, lease=30) as lease:
            proxy.lose_reply(lambda data: data.startswith(f"ms {mkey} ".encode()) and b" C" in data)
            with pytest.raises(BackendUnavailable):
                lease.extend(30)
            assert proxy.faulted.is_set()
            assert lease.extend(30) > 29      # recognised by its token, CAS refreshed
            proxy.lose_reply(lambda data: data.startswith(f"ms {mkey} ".encode()) and b" C" in data)
            with pytest.raises(BackendUnavailable):
                lease.extend(30)
    finally:
        remove_listener(violations.append)
    assert violations == []                   # released as ours: no TXN104
