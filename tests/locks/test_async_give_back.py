"""The generic ``Backend.aacquire`` (a worker thread) after its task is cancelled.

The thread cannot be stopped: it keeps polling, and can win the lock after the
caller is gone.  Unless the lock is given back at once, nobody holds a lease for
it and everyone else waits until the lease ends.  The race is forced here: the
task is cancelled while a holder blocks it, and only then does the holder let go.

The give-back must not need the event loop: the loop may end while the thread
still polls (``asyncio.run`` cancels every task left, the attempt's own task
included, then waits for the thread; a loop can also just be closed).  The last
two tests let the holder go only once the loop is shutting down or closed.
"""
from __future__ import annotations

import asyncio
import threading
import time
from typing import Callable

import pytest

from txnsafety.locks import LockTimeout, get_backend, global_lock
from txnsafety.locks.backend import AcquireRequest, Backend, Grant
from txnsafety.locks.memcached_backend import MemcachedBackend
from txnsafety.locks.memory import MemoryBackend
from txnsafety.locks.postgres_backend import PostgresBackend
from txnsafety.locks.redis_backend import RedisBackend

from .conftest import BACKENDS, backend_url
from .test_contract import _wait_until_waiting

LEASE = 30.0        # what a late grant would hold the lock for without the give-back
WITHIN = 5.0        # the lock must be free again well before that


class _Won:
    """Wraps a backend's real blocking ``acquire``; an event once it grants the lock."""

    def __init__(self, acquire: Callable[[AcquireRequest], Grant]) -> None:
        self._acquire = acquire
        self.event = threading.Event()
        self.grants: list[Grant] = []

    def __call__(self, req: AcquireRequest) -> Grant:
        grant = self._acquire(req)
        self.grants.append(grant)
        self.event.set()
        return grant


def _worker_thread_backends() -> list[str]:
    """The built-in backends whose ``aacquire`` is the generic worker-thread one."""
    classes = {"memory": MemoryBackend, "redis": RedisBackend, "memcached": MemcachedBackend,
               "postgresql": PostgresBackend, "postgresql-xact": PostgresBackend}
    return [name for name in BACKENDS if classes[name].aacquire is Backend.aacquire]


@pytest.fixture(params=_worker_thread_backends())
def url(request: pytest.FixtureRequest) -> str:
    return backend_url(request.param, request)


async def _acquire_and_hold(url: str, key: str) -> None:
    async with global_lock(key, backend=url, lease=LEASE, wait_timeout=10, priority="interactive"):
        await asyncio.sleep(LEASE)  # never reached: cancelled while waiting


def test_cancelled_waiter_gives_back_a_lock_its_thread_wins_later(
        url: str, key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        async with global_lock(key, backend=url, lease=LEASE, priority="interactive"):
            # from here on the first grant is the cancelled waiter's worker thread's
            won = _Won(get_backend(url).acquire)
            monkeypatch.setattr(get_backend(url), "acquire", won)
            task = asyncio.create_task(_acquire_and_hold(url, key))
            await asyncio.to_thread(_wait_until_waiting, url, key, 1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert not won.event.is_set()   # the thread still polls behind the holder
        # the holder let go: the cancelled caller's thread takes the lock now
        assert await asyncio.to_thread(won.event.wait, WITHIN), "the worker thread never won"
        late = won.grants[0]
        t0 = time.monotonic()
        try:
            async with global_lock(key, backend=url, lease=1, wait_timeout=WITHIN,
                                   priority="interactive") as third:
                assert third.fence > late.fence
        except LockTimeout:
            pytest.fail(f"a late grant kept the lock (a {LEASE:.0f}s lease) after its caller was cancelled")
        assert time.monotonic() - t0 < WITHIN

    asyncio.run(main())


def _hold_until(url: str, key: str, held: threading.Event, go: threading.Event) -> None:
    """A holder in a thread of its own, so it can let go after the test's loop has ended."""
    with global_lock(key, backend=url, lease=LEASE, priority="interactive"):
        held.set()
        assert go.wait(LEASE / 2), "the test never let the holder go"


def _assert_given_back(url: str, key: str, late: Grant) -> None:
    """A third party gets the lock well before the late grant's lease would end."""
    t0 = time.monotonic()
    try:
        with global_lock(key, backend=url, lease=1, wait_timeout=WITHIN, priority="interactive") as third:
            assert third.fence > late.fence
    except LockTimeout:
        pytest.fail(f"a late grant kept the lock (a {LEASE:.0f}s lease) after its caller's event loop ended")
    assert time.monotonic() - t0 < WITHIN


def _blocked_behind_a_holder(url: str, key: str, monkeypatch: pytest.MonkeyPatch,
                             ) -> tuple[threading.Thread, threading.Event, _Won]:
    """Start a holder; from then on the first grant is the async waiter's worker thread's."""
    held, go = threading.Event(), threading.Event()
    holder = threading.Thread(target=_hold_until, args=(url, key, held, go), daemon=True)
    holder.start()
    assert held.wait(WITHIN)
    won = _Won(get_backend(url).acquire)
    monkeypatch.setattr(get_backend(url), "acquire", won)
    return holder, go, won


def test_waiter_left_queued_when_asyncio_run_ends_gives_back_a_lock_its_thread_wins_at_shutdown(
        url: str, key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    holder, go, won = _blocked_behind_a_holder(url, key, monkeypatch)

    async def main() -> None:
        task = asyncio.create_task(_acquire_and_hold(url, key))
        # asyncio.run's shutdown cancels this task and the attempt's own task in one
        # go; the holder lets go only once that cancellation went through
        task.add_done_callback(lambda _: go.set())
        await asyncio.to_thread(_wait_until_waiting, url, key, 1)
        assert not won.event.is_set()
        # return with the waiter still queued

    asyncio.run(main())   # waits for the worker thread, which wins the lock meanwhile
    holder.join()
    assert won.event.is_set(), "the worker thread never won"
    _assert_given_back(url, key, won.grants[0])


def test_cancelled_waiter_gives_back_a_lock_its_thread_wins_after_the_loop_closed(
        url: str, key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    holder, go, won = _blocked_behind_a_holder(url, key, monkeypatch)

    async def main() -> None:
        task = asyncio.create_task(_acquire_and_hold(url, key))
        await asyncio.to_thread(_wait_until_waiting, url, key, 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()      # does not wait for the worker thread, which still polls
    assert not won.event.is_set()
    go.set()              # only now can the thread win: no loop left to run a callback
    holder.join()
    assert won.event.wait(WITHIN), "the worker thread never won"
    _assert_given_back(url, key, won.grants[0])


def test_waiter_cancelled_after_its_thread_handed_the_grant_over_gives_it_back(
        url: str, key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The other order: the thread has won and handed the grant over, but the caller
    is cancelled before it takes it; then the caller owns the grant and gives it back."""
    async def main() -> None:
        loop = asyncio.get_running_loop()
        task: asyncio.Task[None] | None = None
        won = _Won(get_backend(url).acquire)

        def win_then_cancel(req: AcquireRequest) -> Grant:
            grant = won(req)
            # queued on the loop before the result is: the task is cancelled first
            loop.call_soon_threadsafe(task.cancel)
            return grant

        monkeypatch.setattr(get_backend(url), "acquire", win_then_cancel)
        task = asyncio.create_task(_acquire_and_hold(url, key))
        with pytest.raises(asyncio.CancelledError):
            await task
        monkeypatch.undo()
        assert won.event.is_set()
        await asyncio.to_thread(_assert_given_back, url, key, won.grants[0])

    asyncio.run(main())
