"""Background lease renewal that fails loudly.

python-redis-lock's renewal thread dies silently when an extend fails, and the
holder goes on believing it holds the lock.  Here a failed renewal marks the
lease LOST (so ``ensure_held()`` raises and the checker reports TXN104 at the
write), logs an error and emits a ``lost`` metric.  A renewal that could not
reach the backend at all is retried while the lease lasts: the lease has not
ended, and reporting it lost would be a false TXN104.
"""
from __future__ import annotations

import asyncio
import logging
import threading

from .errors import BackendUnavailable, LockError
from .lease import Lease, LeaseState
from .observe import emit

log = logging.getLogger("txnsafety.locks")


def _interval(lease: Lease, renew: bool | float) -> float:
    if renew is True:
        return max(lease.lease_seconds / 3.0, 0.01)
    return float(renew)


def _mark_lost(lease: Lease, why: str) -> None:
    if lease.state is LeaseState.HELD:
        lease.state = LeaseState.LOST
    log.error("txnsafety: lease on lock %r lost: %s", lease.key, why,
              extra={"txnsafety_lock": {"event": "lost", "key": lease.key, "why": why}})
    emit("lost", key=lease.key, why=why)


def _retry_later(lease: Lease, exc: BackendUnavailable) -> bool:
    """A renewal that could not reach the backend (a stall, a cut) is in doubt, not
    a lost lease: the lease still runs to its deadline, so try again at the next
    interval.  Lost only once the deadline has passed unrenewed.  True: go on."""
    if lease.remaining() > 0:
        log.warning("txnsafety: renewal of lock %r failed, retrying while the lease lasts "
                    "(%.3fs left): %s", lease.key, lease.remaining(), exc)
        return True
    _mark_lost(lease, f"renewal failed until the lease ended: {exc!r}")
    return False


class ThreadRenewer:
    """Renews a lease from a daemon thread until stopped."""

    def __init__(self, lease: Lease, renew: bool | float) -> None:
        self.lease = lease
        self.interval = _interval(lease, renew)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"txnsafety-renew-{lease.key}",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            lease = self.lease
            if lease.state is not LeaseState.HELD:
                return
            try:
                lease.extend()
            except BackendUnavailable as exc:
                if not _retry_later(lease, exc):
                    return
            except (LockError, Exception) as exc:  # noqa: B014 - any other failure loses the lease
                _mark_lost(lease, f"renewal failed: {exc!r}")
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)


class TaskRenewer:
    """Renews a lease from an asyncio task until stopped."""

    def __init__(self, lease: Lease, renew: bool | float) -> None:
        self.lease = lease
        self.interval = _interval(lease, renew)
        self._stopped = False
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while not self._stopped:
            await asyncio.sleep(self.interval)
            lease = self.lease
            if self._stopped or lease.state is not LeaseState.HELD:
                return
            try:
                await lease.aextend()
            except BackendUnavailable as exc:
                if not _retry_later(lease, exc):
                    return
            except Exception as exc:
                _mark_lost(lease, f"renewal failed: {exc!r}")
                return

    async def astop(self) -> None:
        self._stopped = True  # also stops a loop whose cancellation a client library swallowed
        self._task.cancel()
        try:
            await self._task
        except (asyncio.CancelledError, Exception):
            pass

    def stop(self) -> None:
        self._stopped = True
        self._task.cancel()
