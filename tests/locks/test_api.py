"""The API layer: re-entrancy, request scopes, priorities, options, logs, metrics, renewal."""
from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import threading
import time
import uuid

import pytest

from txnsafety import checker
from txnsafety.context import Priority, held_leases, request_scope
from txnsafety.locks import (
    BackendUnavailable, LeaseLost, LeaseState, LockTimeout, add_metrics_hook, configure,
    fetch_under_lock, get_backend, global_lock, lock_orders, options, remove_metrics_hook,
    user_write_lock,
)
from txnsafety.policies import written_with_user_lock

DOWN = {
    "redis": "redis://127.0.0.1:1/0",
    "memcached": "memcached://127.0.0.1:1",
    "postgresql": "postgresql://txnsafety:txnsafety@127.0.0.1:1/txnsafety",
}


@pytest.fixture
def events():
    seen: list[tuple[str, dict]] = []

    def hook(event: str, **fields) -> None:
        seen.append((event, fields))
    add_metrics_hook(hook)
    yield seen
    remove_metrics_hook(hook)


def test_lease_is_recorded_in_context(key: str) -> None:
    assert not held_leases()
    with user_write_lock(key) as lease:
        assert held_leases() == (lease,)
        assert lease.key == key and lease.backend_key == "user:" + key
        with global_lock("other-" + key) as other:
            assert held_leases() == (lease, other)
    assert held_leases() == ()


def test_default_backend_is_memory() -> None:
    assert get_backend().scheme == "memory"


def test_lock_id_is_str_converted() -> None:
    with user_write_lock(42) as lease:
        assert lease.key == "42"
        with user_write_lock("42") as again:
            assert again is lease


def test_user_and_global_locks_do_not_share_keys(key: str) -> None:
    with user_write_lock(key):
        with global_lock(key, wait_timeout=0) as g:   # different backend key: no conflict
            assert g.kind == "global"


def test_priority_defaults(key: str) -> None:
    # pytest runs each test in an interactive request scope
    with global_lock(key) as lease:
        assert lease.priority is Priority.INTERACTIVE
    with request_scope("job", priority=Priority.BATCH):
        with global_lock(key) as lease:
            assert lease.priority is Priority.BATCH
    result = []
    t = threading.Thread(target=lambda: result.append(_priority_outside_scope(key)))
    t.start()
    t.join()
    assert result == [Priority.BATCH]
    assert options().wait_for(Priority.INTERACTIVE) == 10.0
    assert options().wait_for(Priority.BATCH) == 60.0


def _priority_outside_scope(key: str) -> Priority:
    with global_lock(key) as lease:
        return lease.priority


def test_request_end_releases_a_forgotten_lock(url: str, key: str) -> None:
    with request_scope("leaky") as scope:
        ctx = user_write_lock(key, backend=url, lease=5)
        lease = ctx.__enter__()
        assert lease.owner.request_id == scope.id
    # the scope's cleanup released it
    assert lease.state is LeaseState.RELEASED
    with user_write_lock(key, backend=url, wait_timeout=0.5):
        pass


def test_normal_exit_discards_the_cleanup(key: str) -> None:
    with request_scope("tidy") as scope:
        with user_write_lock(key):
            assert len(scope._cleanups) == 1
        assert scope._cleanups == []


@pytest.mark.parametrize("name", sorted(DOWN))
def test_backend_down_fail_closed(name: str, key: str, events) -> None:
    with pytest.raises(BackendUnavailable) as info:
        with global_lock(key, backend=DOWN[name], on_backend_error="fail_closed", wait_timeout=0.5):
            pass
    assert key in str(info.value)
    assert ("backend_error", {"key": key, "backend": get_backend(DOWN[name]).name,
                              "policy": "fail_closed"}) in events
    assert held_leases() == ()


@pytest.mark.parametrize("name", sorted(DOWN))
def test_backend_down_fail_open_gives_unverified_lease(name: str, key: str, events, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="txnsafety.locks"):
        with user_write_lock(key, backend=DOWN[name], on_backend_error="fail_open",
                             wait_timeout=0.5) as lease:
            assert lease.state is LeaseState.UNVERIFIED
            assert not lease.verified and lease.is_live() and lease.fence == 0
            assert held_leases() == (lease,)
            lease.ensure_held()  # live, though unverified
    assert lease.state is LeaseState.RELEASED
    assert any("UNVERIFIED" in r.getMessage() for r in caplog.records)
    assert any(e == "backend_error" and f["policy"] == "fail_open" for e, f in events)


def test_configure_default_backend_and_options(redis_url: str, key: str) -> None:
    before = options()
    try:
        configure(url=redis_url, lease=7, on_backend_error="fail_open")
        with global_lock(key) as lease:
            assert lease.backend.scheme == "redis" and lease.lease_seconds == 7
        with pytest.raises(ValueError):
            configure(on_backend_error="sometimes")
        with pytest.raises(TypeError):
            configure(no_such_option=1)
        with pytest.raises(ValueError):
            configure(url="zookeeper://127.0.0.1")
    finally:
        configure(url="memory://", **{k: getattr(before, k) for k in ("lease", "on_backend_error")})
    assert get_backend().scheme == "memory"


def test_env_var_picks_backend(redis_url: str) -> None:
    code = "from txnsafety.locks import get_backend; print(get_backend().scheme)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "TXNSAFETY_LOCK_URL": redis_url}).stdout
    assert out.strip() == "redis"


def test_bad_url_and_options() -> None:
    with pytest.raises(ValueError):
        get_backend("zookeeper://x")
    with pytest.raises(ValueError):
        global_lock("x", lease=0)
    with pytest.raises(ValueError):
        global_lock("x", on_backend_error="maybe")


def test_contention_is_logged_and_counted(key: str, events, caplog) -> None:
    holding = threading.Event()
    done = threading.Event()

    def holder() -> None:
        with global_lock(key, priority="interactive"):
            holding.set()
            time.sleep(0.1)  # hold for a measured duration
        done.set()

    t = threading.Thread(target=holder)
    t.start()
    assert holding.wait(5)
    with caplog.at_level(logging.INFO, logger="txnsafety.locks"):
        with global_lock(key, wait_timeout=5) as lease:
            assert lease.waited > 0.02
    t.join()
    msgs = [r for r in caplog.records if "after waiting" in r.getMessage()]
    assert msgs and key in msgs[0].getMessage() and "pid" in msgs[0].getMessage()
    assert msgs[0].txnsafety_lock["waited_on"]
    acquired = [f for e, f in events if e == "acquired" and f["key"] == key]
    assert [f["contended"] for f in acquired] == [False, True]


def test_timeout_is_logged_and_counted(key: str, events, caplog) -> None:
    with global_lock(key):
        with caplog.at_level(logging.WARNING, logger="txnsafety.locks"):
            with pytest.raises(LockTimeout):
                with global_lock(key, wait_timeout=0.05):
                    pass
    assert any(e == "timeout" and f["key"] == key and f["holder"] for e, f in events)
    assert any("could not acquire" in r.getMessage() for r in caplog.records)


def test_lock_order_is_logged_and_inversions_warned(caplog) -> None:
    a, b = f"a-{uuid.uuid4().hex[:6]}", f"b-{uuid.uuid4().hex[:6]}"
    with caplog.at_level(logging.INFO, logger="txnsafety.locks"):
        with global_lock(a):
            with global_lock(b):
                pass
        assert (a, b) in lock_orders()
        assert not any("deadlock-prone" in r.getMessage() for r in caplog.records)
        with global_lock(b):
            with global_lock(a):
                pass
    assert (b, a) in lock_orders()
    assert any("deadlock-prone" in r.getMessage() and a in r.getMessage() for r in caplog.records)


def test_renewal_keeps_a_short_lease_alive(url: str, key: str) -> None:
    lease_s = 1.2 if url.startswith("memcached") else 0.3
    with global_lock(key, backend=url, lease=lease_s, renew=True) as lease:
        time.sleep(lease_s * 2.5)  # hold past the original lease
        assert lease.state is LeaseState.HELD and lease.is_live()
        lease.ensure_held(check_backend=True)
    assert lease.state is LeaseState.RELEASED


@pytest.mark.parametrize("name", ["memory", "redis", "postgresql"])
def test_async_renewal(name: str, key: str, request) -> None:
    from tests.locks.conftest import backend_url
    url = backend_url(name, request)

    async def main() -> None:
        async with global_lock(key, backend=url, lease=0.3, renew=True) as lease:
            await asyncio.sleep(0.8)  # hold past the original lease
            assert lease.state is LeaseState.HELD and lease.is_live()
            await lease.aensure_held(check_backend=True)
        assert lease.state is LeaseState.RELEASED

    asyncio.run(main())


def test_failed_renewal_marks_lease_lost(redis_url: str, key: str, events, txnsafety_violations) -> None:
    lost = threading.Event()

    def hook(event: str, **fields) -> None:
        if event == "lost":
            lost.set()
    add_metrics_hook(hook)
    url = redis_url
    backend = get_backend(url)
    try:
        with global_lock(key, backend=url, lease=0.6, renew=0.1) as lease:
            backend.client.delete(backend.keys_for(key)[0][0])  # the key vanishes (eviction, failover)
            assert lost.wait(5)
            assert lease.state is LeaseState.LOST and not lease.is_live()
            with pytest.raises(LeaseLost):
                lease.ensure_held()
    finally:
        remove_metrics_hook(hook)
    assert txnsafety_violations.codes() == ["TXN104"]
    assert "renewal failed" in txnsafety_violations[0].message


def test_ensure_held_check_backend_sees_a_vanished_key(redis_url: str, key: str,
                                                       txnsafety_violations) -> None:
    backend = get_backend(redis_url)
    with global_lock(key, backend=redis_url, lease=5) as lease:
        lease.ensure_held(check_backend=True)
        backend.client.delete(backend.keys_for(key)[0][0])
        with pytest.raises(LeaseLost):
            lease.ensure_held(check_backend=True)
    assert txnsafety_violations.codes() == ["TXN104"]


@pytest.mark.txnsafety_allow("the late release is the point of the test")
def test_expired_release_does_not_mask_the_original_error(key: str) -> None:
    with pytest.raises(KeyError):
        with global_lock(key, lease=0.05):
            time.sleep(0.1)
            raise KeyError("original")


@pytest.mark.txnsafety_allow("the late release is the point of the test")
def test_expired_release_raises_in_raise_mode(key: str) -> None:
    from txnsafety.report import StompingError

    with pytest.raises(StompingError) as info:
        with global_lock(key, lease=0.05):
            time.sleep(0.1)
    assert info.value.violation.code.value == "TXN104"


# -- the checker sees the leases ---------------------------------------------------------

class _Store:
    rows: dict[int, dict] = {}


@written_with_user_lock(lambda e: e.user_id)
class Account:
    def __init__(self, user_id: int, balance: int) -> None:
        self.user_id = user_id
        self.balance = balance

    @classmethod
    def get(cls, user_id: int) -> "Account":
        row = _Store.rows[user_id]
        entity = cls(user_id, row["balance"])
        checker.record_read(entity, key=user_id)
        return entity

    def put(self) -> None:
        checker.record_write(self, key=self.user_id)
        _Store.rows[self.user_id] = {"balance": self.balance}

    def txnsafety_refetch(self) -> "Account":
        return Account.get(self.user_id)

    async def txnsafety_arefetch(self) -> "Account":
        return Account.get(self.user_id)


class NoPolicy:
    pass


def test_write_under_lock_is_clean(txnsafety_violations) -> None:
    _Store.rows[1] = {"balance": 10}
    with user_write_lock(1):
        acct = Account.get(1)
        acct.balance += 5
        acct.put()
    assert txnsafety_violations.codes() == []
    assert _Store.rows[1]["balance"] == 15


def test_write_after_lease_expired_is_txn104(txnsafety_violations) -> None:
    _Store.rows[2] = {"balance": 10}
    with user_write_lock(2, lease=0.1):
        acct = Account.get(2)
        time.sleep(0.15)  # paused past the lease
        acct.balance += 5
        acct.put()
    assert "TXN104" in txnsafety_violations.codes()


def test_write_under_fail_open_lease_is_reported(txnsafety_violations) -> None:
    _Store.rows[3] = {"balance": 10}
    with user_write_lock(3, backend=DOWN["redis"], on_backend_error="fail_open", wait_timeout=0.2):
        acct = Account.get(3)
        acct.balance += 1
        acct.put()
    assert txnsafety_violations.codes() == ["TXN111"]


def test_fetch_under_lock_rereads(txnsafety_violations) -> None:
    _Store.rows[4] = {"balance": 10}
    stale = Account.get(4)
    _Store.rows[4] = {"balance": 99}         # a concurrent writer
    with fetch_under_lock(stale) as fresh:
        assert fresh is not stale and fresh.balance == 99
        assert held_leases()[0].key == "4"
        fresh.balance += 1
        fresh.put()
        # already held: no-op, the same object back
        with fetch_under_lock(fresh) as same:
            assert same is fresh
    assert held_leases() == ()
    assert _Store.rows[4]["balance"] == 100
    assert txnsafety_violations.codes() == []


def test_fetch_under_lock_async() -> None:
    _Store.rows[5] = {"balance": 1}
    stale = Account.get(5)
    _Store.rows[5] = {"balance": 2}

    async def main() -> int:
        async with fetch_under_lock(stale) as fresh:
            assert held_leases()[0].key == "5"
            return fresh.balance

    assert asyncio.run(main()) == 2


def test_fetch_under_lock_needs_a_user_lock_policy() -> None:
    with pytest.raises(TypeError, match="NoPolicy"):
        fetch_under_lock(NoPolicy())


def test_fetch_under_lock_releases_when_refetch_fails(key: str) -> None:
    class Gone(Account):
        def txnsafety_refetch(self) -> "Account":
            raise LookupError("row deleted")

    with pytest.raises(LookupError):
        with fetch_under_lock(Gone(6, 0)):
            pass
    assert held_leases() == ()
    with global_lock("user:6", wait_timeout=0):
        pass


def test_urls_in_messages_never_carry_the_password():
    from txnsafety.locks import configure
    from txnsafety.locks.backend import redacted_url

    assert redacted_url("redis://:s3cret@127.0.0.1:6379/0") == "redis://:***@127.0.0.1:6379/0"
    assert redacted_url("postgresql://me:s3cret@db/app") == "postgresql://me:***@db/app"
    assert redacted_url("memcached://127.0.0.1:11211") == "memcached://127.0.0.1:11211"
    with pytest.raises(ValueError) as err:
        configure(url="nosuch://me:s3cret@host")
    assert "s3cret" not in str(err.value) and "me:***@host" in str(err.value)
