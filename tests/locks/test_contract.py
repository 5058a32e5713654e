"""The behaviour every backend must have, run against each real server."""
from __future__ import annotations

import asyncio
import threading
import time

import pytest

from txnsafety.context import Priority
from txnsafety.locks import (
    Lease, LeaseLost, LeaseState, LockTimeout, global_lock, user_write_lock,
)
from txnsafety.locks.lease import Owner


def test_lease_fields(url: str, key: str) -> None:
    with global_lock(key, backend=url, lease=5, wait_timeout=1) as lease:
        assert lease.key == key
        assert len(lease.token) == 32 and int(lease.token, 16) >= 0
        assert lease.fence > 0
        assert lease.state is LeaseState.HELD and lease.verified and lease.is_live()
        assert 4.0 < lease.remaining() <= 5.0
        assert lease.owner.pid > 0 and lease.owner.host
        lease.ensure_held(check_backend=True)
    assert lease.state is LeaseState.RELEASED and not lease.is_live()
    assert lease.remaining() == 0.0


def test_fence_grows_on_every_acquisition(url: str, key: str) -> None:
    fences = []
    for _ in range(4):
        with global_lock(key, backend=url, lease=5, wait_timeout=1) as lease:
            fences.append(lease.fence)
    assert fences == sorted(fences) and len(set(fences)) == 4


def test_mutual_exclusion_threads(url: str, key: str) -> None:
    """An unguarded read-sleep-write counter loses no update under the lock."""
    counter = {"n": 0}
    inside = []
    n_threads, rounds = 4, 10
    barrier = threading.Barrier(n_threads)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            barrier.wait()
            for _ in range(rounds):
                with global_lock(key, backend=url, lease=5, wait_timeout=20,
                                 priority=Priority.INTERACTIVE):
                    inside.append(1)
                    assert len(inside) == 1
                    value = counter["n"]
                    time.sleep(0.001)
                    counter["n"] = value + 1
                    inside.pop()
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert counter["n"] == n_threads * rounds


def test_timeout_names_key_and_holder(url: str, key: str) -> None:
    with global_lock(key, backend=url, lease=5, wait_timeout=1) as held:
        t0 = time.monotonic()
        with pytest.raises(LockTimeout) as info:
            with global_lock(key, backend=url, wait_timeout=0.3):
                pass
        waited = time.monotonic() - t0
        assert 0.25 <= waited < 2.0
        err = info.value
        assert err.key == key and key in str(err)
        assert err.holder is not None and str(held.owner.pid) in err.holder
        # try-once (wait_timeout=0) fails at once
        with pytest.raises(LockTimeout):
            with global_lock(key, backend=url, wait_timeout=0):
                pass
    # and the lock is free again afterwards
    with global_lock(key, backend=url, wait_timeout=0.5):
        pass


def test_global_lock_is_not_reentrant(url: str, key: str) -> None:
    with global_lock(key, backend=url, lease=5):
        with pytest.raises(LockTimeout):
            with global_lock(key, backend=url, wait_timeout=0.2):
                pass


def test_user_lock_reentrant(url: str, key: str) -> None:
    with user_write_lock(key, backend=url, lease=5) as outer:
        with user_write_lock(key, backend=url) as inner:
            assert inner is outer and outer.depth == 2
            with user_write_lock(key, backend=url) as third:
                assert third is outer and outer.depth == 3
        assert outer.state is LeaseState.HELD and outer.depth == 1
        assert outer.backend.is_held(outer)
    assert outer.state is LeaseState.RELEASED
    # really released: someone else gets it at once
    with global_lock("user:" + key, backend=url, wait_timeout=0):
        pass


def test_non_holder_cannot_release_or_extend(url: str, key: str, backend) -> None:
    with global_lock(key, backend=url, lease=5) as lease:
        impostor = Lease(key=key, backend_key=lease.backend_key, token="0" * 32, fence=lease.fence,
                         owner=Owner.here("impostor"), lease_seconds=5, deadline=lease.deadline,
                         state=LeaseState.HELD, priority=Priority.INTERACTIVE, kind="global",
                         backend=backend, handle=None)
        assert backend.release(impostor) is False
        assert backend.extend(impostor, 30) is False
        assert backend.is_held(lease)
        with pytest.raises(LockTimeout):
            with global_lock(key, backend=url, wait_timeout=0):
                pass


def test_extend_by_holder(url: str, key: str) -> None:
    with global_lock(key, backend=url, lease=1.5) as lease:
        assert lease.extend(4) > 3.0
        assert lease.remaining() > 3.0
        assert lease.backend.is_held(lease)


def test_expiry_lets_next_in_and_late_release_is_reported(url: str, key: str, txnsafety_violations) -> None:
    ctx = global_lock(key, backend=url, lease=0.4 if not url.startswith("memcached") else 1)
    first = ctx.__enter__()
    # a second acquirer gets the lock once the lease ends, without the holder releasing
    with global_lock(key, backend=url, wait_timeout=5, priority="interactive") as second:
        assert second.fence > first.fence
        assert not first.is_live()
        with pytest.raises(LeaseLost):
            first.ensure_held()
        with pytest.raises(LeaseLost):
            first.extend()
        ctx.__exit__(None, None, None)          # the late holder releases: refused + reported
        assert second.backend.is_held(second)   # ...and did not delete the new holder's lock
    assert first.state is LeaseState.LOST
    assert txnsafety_violations.codes() == ["TXN104"]
    v = txnsafety_violations[0]
    assert v.key == key and v.model == "lock"


def test_priority_interactive_before_batch(url: str, key: str) -> None:
    """A batch waiter queued first still goes after an interactive one."""
    if "scope=transaction" in url:
        pytest.skip("transaction scope queues a batch waiter FIFO (no LISTEN inside a transaction)")
    order: list[str] = []
    queued = threading.Event()

    def waiter(name: str, prio: Priority) -> None:
        with global_lock(key, backend=url, lease=5, wait_timeout=10, priority=prio):
            order.append(name)

    with global_lock(key, backend=url, lease=5, priority=Priority.INTERACTIVE):
        b = threading.Thread(target=waiter, args=("batch", Priority.BATCH))
        b.start()
        _wait_until_waiting(url, key, 1)
        i = threading.Thread(target=waiter, args=("interactive", Priority.INTERACTIVE))
        i.start()
        _wait_until_waiting(url, key, 2)
        queued.set()
    b.join()
    i.join()
    assert order == ["interactive", "batch"]


def test_interactive_waiters_served_in_arrival_order(url: str, key: str) -> None:
    if url.startswith("memcached"):
        pytest.skip("memcached has no queue: waiters retry with backoff (documented)")
    order: list[int] = []

    def waiter(i: int) -> None:
        with global_lock(key, backend=url, lease=5, wait_timeout=10, priority=Priority.INTERACTIVE):
            order.append(i)

    threads = []
    with global_lock(key, backend=url, lease=5, priority=Priority.INTERACTIVE):
        for i in range(4):
            t = threading.Thread(target=waiter, args=(i,))
            t.start()
            threads.append(t)
            _wait_until_waiting(url, key, i + 1)   # queued before the next one arrives
    for t in threads:
        t.join()
    assert order == [0, 1, 2, 3]


def test_redis_same_millisecond_arrivals_keep_their_order(key: str, request: pytest.FixtureRequest) -> None:
    """Arrival order is the order the server queued the waiters, not their clock reading.

    Eight waiters are queued back to back inside one MULTI (tens of microseconds,
    so most share a millisecond of the server clock), each with a token that sorts
    *before* the tokens of those that arrived earlier: a queue ordered by arrival
    time in milliseconds (ties broken by token) serves them in the wrong order.
    Interactive and batch arrivals are interleaved; each class must keep its own order.
    """
    from tests.locks.conftest import backend_url
    from txnsafety.locks import get_backend
    from txnsafety.locks.backend import AcquireRequest

    url = backend_url("redis", request)
    backend = get_backend(url)
    keys = backend.keys_for(key)[0]
    arrivals = [(f"{15 - n:x}" * 32, Priority.BATCH if n % 2 else Priority.INTERACTIVE)
                for n in range(8)]
    assert [tok for tok, _ in arrivals] == sorted((tok for tok, _ in arrivals), reverse=True)
    with global_lock(key, backend=url, lease=5, priority=Priority.INTERACTIVE):
        pipe = backend.client.pipeline(transaction=True)
        for tok, prio in arrivals:
            req = AcquireRequest(key, key, tok, f"waiter-{tok[0]}", 5, 10, prio)
            backend._s_acquire(keys=keys, args=backend._args(req, True), client=pipe)
        assert [res[0] for res in pipe.execute()] == [0] * 8   # all queued behind the holder
        assert backend_waiters(backend, key) == 8
    # the release handed the lock to the head waiter; each one releases in turn
    served = []
    for _ in arrivals:
        tok = backend.client.hget(keys[0], "token").decode()
        served.append(tok)
        assert backend._run(backend._s_release, backend._wire(key), (tok.encode(),)) == 1
        backend.client.delete(backend.keys_for(key)[1] + tok)   # its (unread) wake-up signal
    assert backend.client.exists(keys[0]) == 0 and backend_waiters(backend, key) == 0
    assert served == ([tok for tok, prio in arrivals if prio is Priority.INTERACTIVE]
                      + [tok for tok, prio in arrivals if prio is Priority.BATCH])


def test_async_tasks_exclusion(url: str, key: str) -> None:
    async def main() -> int:
        counter = {"n": 0}

        async def work() -> None:
            for _ in range(5):
                async with global_lock(key, backend=url, lease=5, wait_timeout=20,
                                       priority="interactive") as lease:
                    assert lease.is_live()
                    value = counter["n"]
                    await asyncio.sleep(0.001)
                    counter["n"] = value + 1

        await asyncio.gather(*(work() for _ in range(4)))
        return counter["n"]

    assert asyncio.run(main()) == 20


def test_async_and_sync_mixed(url: str, key: str) -> None:
    """A thread holds; an asyncio task waits and gets it on release, and back."""
    held = threading.Event()
    release = threading.Event()

    def thread_holder() -> None:
        with global_lock(key, backend=url, lease=5, priority="interactive"):
            held.set()
            release.wait(5)

    t = threading.Thread(target=thread_holder)
    t.start()
    assert held.wait(5)

    async def main() -> float:
        async def let_go() -> None:
            await asyncio.sleep(0.2)
            release.set()

        asyncio.get_running_loop().create_task(let_go())
        t0 = time.monotonic()
        async with global_lock(key, backend=url, lease=5, wait_timeout=5, priority="interactive") as lease:
            waited = time.monotonic() - t0
            assert lease.is_live()
            # and a sync caller (in a thread) now waits for the task
            result: list[str] = []
            th = threading.Thread(target=lambda: _try(url, key, result))
            th.start()
            await asyncio.to_thread(th.join)
            assert result == ["timeout"]
        return waited

    waited = asyncio.run(main())
    t.join()
    assert 0.15 < waited < 2.0


def test_async_reentrant_user_lock(url: str, key: str) -> None:
    async def main() -> None:
        async with user_write_lock(key, backend=url, lease=5) as outer:
            async with user_write_lock(key, backend=url) as inner:
                assert inner is outer and outer.depth == 2

            # a child task shares the request's lease
            async def child() -> Lease:
                async with user_write_lock(key, backend=url) as lease:
                    return lease
            assert await asyncio.create_task(child()) is outer
            assert outer.state is LeaseState.HELD
        assert outer.state is LeaseState.RELEASED

    asyncio.run(main())


def test_async_cancelled_waiter_leaves_queue(url: str, key: str) -> None:
    async def main() -> None:
        async with global_lock(key, backend=url, lease=5, priority="interactive"):
            task = asyncio.create_task(_acquire_and_hold(url, key))
            # cancel a waiter the backend has really queued, not one still on its way
            await asyncio.to_thread(_wait_until_waiting, url, key, 1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        # the cancelled waiter must not have been handed the lock (or must have passed it on)
        async with global_lock(key, backend=url, wait_timeout=1.5, priority="interactive"):
            pass

    asyncio.run(main())


async def _acquire_and_hold(url: str, key: str) -> None:
    async with global_lock(key, backend=url, lease=5, wait_timeout=10, priority="interactive"):
        await asyncio.sleep(10)


def _try(url: str, key: str, result: list[str]) -> None:
    try:
        with global_lock(key, backend=url, wait_timeout=0.1):
            result.append("acquired")
    except LockTimeout:
        result.append("timeout")


def _wait_until_waiting(url: str, key: str, n: int) -> None:
    """Block until ``n`` waiters are queued for ``key`` (backend-specific peek)."""
    from txnsafety.locks import get_backend
    backend = get_backend(url)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if backend_waiters(backend, key) >= n:
            return
        time.sleep(0.005)
    raise AssertionError(f"{n} waiters never queued")


def backend_waiters(backend, key: str) -> int:
    scheme = backend.scheme
    if scheme == "memory":
        with backend._mutex:
            k = backend._keys.get(key)
            return len(k.interactive) + len(k.batch) if k else 0
    if scheme == "redis":
        keys, _ = backend.keys_for(key)
        return backend.client.zcard(keys[2]) + backend.client.zcard(keys[3])
    return backend.waiting(key)
