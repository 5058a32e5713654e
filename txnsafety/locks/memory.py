"""``memory://``: the embedded default, for one process (threads and asyncio tasks).

Why this design: waiters are queued (interactive before batch, each class in
arrival order) and the releaser *hands the lock over* to the head waiter before
waking it, so a newcomer can never barge in between the wake-up and the retry,
and nobody polls.  A thread waits on its own :class:`threading.Event`; a task
awaits a future completed with ``call_soon_threadsafe``.  A waiter sleeps at
most until the holder's lease deadline, so an expired holder is replaced at its
deadline, not at the next poll.
"""
from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import deque
from typing import Any

from ..context import Priority
from .backend import AcquireRequest, Backend, Grant, HeldLock
from .errors import LockTimeout


class _Hold:
    __slots__ = ("token", "owner", "fence", "deadline")

    def __init__(self, token: str, owner: str, fence: int, deadline: float) -> None:
        self.token, self.owner, self.fence, self.deadline = token, owner, fence, deadline


class _Waiter:
    __slots__ = ("req", "event", "loop", "future", "granted")

    def __init__(self, req: AcquireRequest) -> None:
        self.req = req
        self.event: threading.Event | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.future: asyncio.Future[None] | None = None
        self.granted: _Hold | None = None

    def wake(self) -> None:
        if self.event is not None:
            self.event.set()
        elif self.loop is not None and self.future is not None:
            fut = self.future
            try:
                self.loop.call_soon_threadsafe(_resolve, fut)
            except RuntimeError:  # loop closed: the waiter is gone
                pass


def _resolve(fut: "asyncio.Future[None]") -> None:
    if not fut.done():
        fut.set_result(None)


class _Key:
    __slots__ = ("hold", "interactive", "batch")

    def __init__(self) -> None:
        self.hold: _Hold | None = None
        self.interactive: deque[_Waiter] = deque()
        self.batch: deque[_Waiter] = deque()


class MemoryBackend(Backend):
    """Process-local lock table; see the module docstring."""

    scheme = "memory"

    def __init__(self, url: str = "memory://") -> None:
        super().__init__(url)
        self._mutex = threading.Lock()
        self._keys: dict[str, _Key] = {}
        # One counter for all keys: it grows on every acquisition, so per key too.
        self._fences = itertools.count(1)

    # -- internals (call with self._mutex held) -------------------------------------
    def _grant(self, k: _Key, req: AcquireRequest, now: float) -> _Hold:
        k.hold = _Hold(req.token, req.owner, next(self._fences), now + req.lease_seconds)
        return k.hold

    def _settle(self, k: _Key, now: float) -> None:
        """Drop an expired holder and hand the lock to the next waiter."""
        if k.hold is not None and k.hold.deadline <= now:
            k.hold = None
        while k.hold is None and (k.interactive or k.batch):
            w = (k.interactive or k.batch).popleft()
            w.granted = self._grant(k, w.req, now)
            w.wake()

    def _forget_if_idle(self, bk: str, k: _Key) -> None:
        if k.hold is None and not k.interactive and not k.batch:
            self._keys.pop(bk, None)

    def _enqueue(self, k: _Key, w: _Waiter) -> None:
        (k.batch if w.req.priority is Priority.BATCH else k.interactive).append(w)

    def _dequeue(self, k: _Key, w: _Waiter) -> None:
        for q in (k.interactive, k.batch):
            try:
                q.remove(w)
            except ValueError:
                pass

    def _try_now(self, req: AcquireRequest, now: float) -> tuple[_Key, _Hold | None]:
        k = self._keys.get(req.backend_key)
        if k is None:
            k = self._keys[req.backend_key] = _Key()
        self._settle(k, now)
        if k.hold is None and not k.interactive and not k.batch:
            return k, self._grant(k, req, now)
        return k, None

    def _timeout(self, req: AcquireRequest, k: _Key, now: float) -> LockTimeout:
        hold = k.hold
        return LockTimeout(req.key, req.wait_timeout, hold.owner if hold else None,
                           (hold.deadline - now) if hold else None)

    def _sleep_for(self, k: _Key, until: float, now: float) -> float:
        limit = until - now
        if k.hold is not None:
            limit = min(limit, k.hold.deadline - now)
        return max(limit, 0.0)

    # -- blocking ----------------------------------------------------------------------
    def acquire(self, req: AcquireRequest) -> Grant:
        start = time.monotonic()
        with self._mutex:
            k, hold = self._try_now(req, start)
            if hold is not None:
                return Grant(hold.fence, deadline=hold.deadline, start=start)
            waited_on = k.hold.owner if k.hold else None
            if req.wait_timeout <= 0:
                raise self._timeout(req, k, start)
            w = _Waiter(req)
            w.event = threading.Event()
            self._enqueue(k, w)
        until = start + req.wait_timeout
        while True:
            with self._mutex:
                outcome = self._step(k, w, req, start, until, waited_on)
                if isinstance(outcome, Grant):
                    return outcome
                w.event.clear()
            w.event.wait(outcome)

    def _step(self, k: Any, w: Any, req: AcquireRequest, start: float, until: float,
              waited_on: Any) -> Grant | float:
        """One look at the queue, under the mutex: the grant, or how long to sleep.

        Shared by the thread and the task waiter; raises LockTimeout when time is up.
        """
        now = time.monotonic()
        self._settle(k, now)
        if w.granted is not None:
            return Grant(w.granted.fence, deadline=w.granted.deadline, start=now,
                         waited=now - start, waited_on=waited_on)
        if now >= until:
            self._dequeue(k, w)
            err = self._timeout(req, k, now)
            self._forget_if_idle(req.backend_key, k)
            raise err
        return self._sleep_for(k, until, now)

    def release(self, lease: HeldLock) -> bool:
        now = time.monotonic()
        with self._mutex:
            k = self._keys.get(lease.backend_key)
            if k is None or k.hold is None or k.hold.token != lease.token:
                if k is not None:
                    self._settle(k, now)
                return False
            live = k.hold.deadline > now
            k.hold = None
            self._settle(k, now)
            self._forget_if_idle(lease.backend_key, k)
            return live

    def extend(self, lease: HeldLock, seconds: float) -> bool:
        now = time.monotonic()
        with self._mutex:
            k = self._keys.get(lease.backend_key)
            if k is None or k.hold is None or k.hold.token != lease.token or k.hold.deadline <= now:
                return False
            k.hold.deadline = now + seconds
            return True

    def is_held(self, lease: HeldLock) -> bool:
        now = time.monotonic()
        with self._mutex:
            k = self._keys.get(lease.backend_key)
            return bool(k and k.hold and k.hold.token == lease.token and k.hold.deadline > now)

    def holder(self, backend_key: str) -> str | None:
        now = time.monotonic()
        with self._mutex:
            k = self._keys.get(backend_key)
            if k is None or k.hold is None or k.hold.deadline <= now:
                return None
            return k.hold.owner

    # -- async -------------------------------------------------------------------------
    async def aacquire(self, req: AcquireRequest) -> Grant:
        loop = asyncio.get_running_loop()
        start = time.monotonic()
        with self._mutex:
            k, hold = self._try_now(req, start)
            if hold is not None:
                return Grant(hold.fence, deadline=hold.deadline, start=start)
            waited_on = k.hold.owner if k.hold else None
            if req.wait_timeout <= 0:
                raise self._timeout(req, k, start)
            w = _Waiter(req)
            w.loop = loop
            self._enqueue(k, w)
        until = start + req.wait_timeout
        task = asyncio.current_task()
        before = task.cancelling() if task is not None else 0
        try:
            while True:
                with self._mutex:
                    outcome = self._step(k, w, req, start, until, waited_on)
                    if isinstance(outcome, Grant):
                        return outcome
                    pause = outcome
                    w.future = fut = loop.create_future()
                try:
                    await asyncio.wait_for(fut, pause)
                except asyncio.TimeoutError:
                    pass
                if task is not None and task.cancelling() > before:
                    # Python 3.11's wait_for can swallow a cancel that races with
                    # the future's completion; do not hold a lock for a gone caller.
                    raise asyncio.CancelledError()
        except asyncio.CancelledError:
            # Cancelled while waiting: leave the queue, and pass the lock on if it
            # was handed to us in the meantime.
            with self._mutex:
                self._dequeue(k, w)
                if w.granted is not None and k.hold is w.granted:
                    k.hold = None
                    self._settle(k, time.monotonic())
                self._forget_if_idle(req.backend_key, k)
            raise

    async def arelease(self, lease: HeldLock) -> bool:
        return self.release(lease)

    async def aextend(self, lease: HeldLock, seconds: float) -> bool:
        return self.extend(lease, seconds)

    async def ais_held(self, lease: HeldLock) -> bool:
        return self.is_held(lease)
