"""The lease: one record per acquisition of a lock.

Why a lease and not a boolean "locked": a lock service over the network can only
promise a lock *for a while*.  The record keeps what a caller needs to stay safe
after that while is over:

* ``token`` -- 128 random bits, also the value the backend stores, so only the
  holder can release or extend (compare-and-delete on every backend);
* ``fence`` -- a number that grows on every acquisition of the key; storage that
  remembers the highest fence it saw can refuse a late write from a holder whose
  lease expired while it was paused (Kleppmann's fencing token, Chubby's sequencer);
* ``owner`` -- request id, host and pid, for "who holds it" in errors and logs;
* ``deadline`` -- on the *monotonic* clock, never later than the backend's expiry,
  so ``remaining()`` errs on the safe side;
* ``state`` -- HELD, UNVERIFIED (the backend failed and the policy said fail
  open), LOST (expired, evicted, renewal failed) or RELEASED.
"""
from __future__ import annotations

import enum
import functools
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..context import Priority
from .errors import LeaseLost, NotHolder

if TYPE_CHECKING:  # pragma: no cover
    from .backend import Backend


class LeaseState(str, enum.Enum):
    HELD = "held"
    UNVERIFIED = "unverified"
    LOST = "lost"
    RELEASED = "released"


_HOST = socket.gethostname()


@dataclass(frozen=True)
class Owner:
    """Who holds a lease: enough to find the process and the request."""

    request_id: str
    host: str
    pid: int

    @classmethod
    def here(cls, request_id: str | None) -> "Owner":
        return _owner(request_id or "-", os.getpid())

    @functools.cached_property
    def label(self) -> str:
        return f"request {self.request_id} on {self.host} pid {self.pid}"

    def __str__(self) -> str:
        return self.label


@functools.lru_cache(maxsize=1024)
def _owner(request_id: str, pid: int) -> Owner:
    return Owner(request_id, _HOST, pid)


class Lease:
    """One acquisition of a lock; satisfies :class:`txnsafety.context.LeaseLike`.

    Obtain it from ``with user_write_lock(...) as lease`` / ``global_lock``; do
    not construct it yourself.
    """

    __slots__ = ("key", "backend_key", "token", "fence", "owner", "lease_seconds", "deadline",
                 "state", "priority", "acquired_at", "waited", "kind", "backend", "handle",
                 "depth", "_mutex", "__weakref__")

    def __init__(self, *, key: str, backend_key: str, token: str, fence: int, owner: Owner,
                 lease_seconds: float, deadline: float, state: LeaseState, priority: Priority,
                 kind: str, backend: "Backend", waited: float = 0.0, handle: Any = None) -> None:
        self.key = key
        self.backend_key = backend_key
        self.token = token
        self.fence = fence
        self.owner = owner
        self.lease_seconds = lease_seconds
        self.deadline = deadline
        self.state = state
        self.priority = priority
        self.acquired_at = time.monotonic()
        self.waited = waited
        self.kind = kind
        self.backend = backend
        #: backend-private state (e.g. the PostgreSQL connection that holds it)
        self.handle = handle
        #: re-entrant nesting depth (user_write_lock)
        self.depth = 1
        self._mutex = threading.Lock()

    # -- LeaseLike --------------------------------------------------------------
    @property
    def verified(self) -> bool:
        """False for a fail-open lease: nothing really holds the lock."""
        return self.state is not LeaseState.UNVERIFIED

    def is_live(self) -> bool:
        """Held (or unverified) and the deadline has not passed."""
        return (self.state in (LeaseState.HELD, LeaseState.UNVERIFIED)
                and time.monotonic() < self.deadline)

    # -- inspection ---------------------------------------------------------------
    def remaining(self) -> float:
        """Seconds left before the lease may end (0 when it has ended)."""
        if self.state not in (LeaseState.HELD, LeaseState.UNVERIFIED):
            return 0.0
        return max(0.0, self.deadline - time.monotonic())

    def ensure_held(self, check_backend: bool = False) -> None:
        """Raise :class:`LeaseLost` unless the lease is live.

        Call it right before a write that must not happen after the lease ended.
        Without a round trip it also catches a lock that went with its connection
        (a PostgreSQL session whose connection was cut or killed: the server
        dropped the lock when the session ended).  ``check_backend=True`` also
        asks the backend (one round trip), which catches an evicted memcached key.
        """
        if self.state is LeaseState.HELD and time.monotonic() >= self.deadline:
            self.state = LeaseState.LOST
        if not self.is_live():
            raise LeaseLost(self.key, self.state.value,
                            "the lease ended; the lock may be held by someone else")
        if self.state is LeaseState.HELD and self.backend.lost_locally(self):
            self.state = LeaseState.LOST
            raise LeaseLost(self.key, self.state.value,
                            "the connection that held it is gone, and the server dropped the lock with it")
        if check_backend and self.state is LeaseState.HELD and not self.backend.is_held(self):
            self.state = LeaseState.LOST
            raise LeaseLost(self.key, self.state.value, "the backend no longer holds it")

    async def aensure_held(self, check_backend: bool = False) -> None:
        """Async form of :meth:`ensure_held`."""
        if check_backend and self.state is LeaseState.HELD and time.monotonic() < self.deadline:
            if not await self.backend.ais_held(self):
                self.state = LeaseState.LOST
                raise LeaseLost(self.key, self.state.value, "the backend no longer holds it")
        self.ensure_held()

    # -- extension -------------------------------------------------------------
    def _check_extendable(self) -> None:
        if self.state is LeaseState.RELEASED:
            raise NotHolder(self.key, "extend (already released)")
        self.ensure_held()

    def extend(self, seconds: float | None = None) -> float:
        """Push the deadline to ``seconds`` (default: the original lease) from now.

        Owner-only: the backend compares the token.  Returns the new remaining
        time; raises :class:`LeaseLost` when the lease had already ended.
        """
        self._check_extendable()
        seconds = self.lease_seconds if seconds is None else float(seconds)
        if self.state is LeaseState.UNVERIFIED:
            self.deadline = time.monotonic() + seconds
            return seconds
        start = time.monotonic()
        if not self.backend.extend(self, seconds):
            self.state = LeaseState.LOST
            raise LeaseLost(self.key, self.state.value, "the backend no longer holds it")
        self.deadline = start + seconds
        return self.remaining()

    async def aextend(self, seconds: float | None = None) -> float:
        """Async form of :meth:`extend`."""
        self._check_extendable()
        seconds = self.lease_seconds if seconds is None else float(seconds)
        if self.state is LeaseState.UNVERIFIED:
            self.deadline = time.monotonic() + seconds
            return seconds
        start = time.monotonic()
        if not await self.backend.aextend(self, seconds):
            self.state = LeaseState.LOST
            raise LeaseLost(self.key, self.state.value, "the backend no longer holds it")
        self.deadline = start + seconds
        return self.remaining()

    def __repr__(self) -> str:
        return (f"<Lease {self.kind} {self.key!r} fence={self.fence} {self.state.value} "
                f"remaining={self.remaining():.3f}s owner=({self.owner})>")
