"""Exceptions of the lock service.

Every exception names the lock key, so a log line alone tells an operator which
lock was in trouble; :class:`LockTimeout` also names who held it, because "who is
in my way" is the first question anyone asks about contention.
"""
from __future__ import annotations


class LockError(Exception):
    """Base class of every lock-service error."""


class LockTimeout(LockError):
    """The lock was not acquired within ``wait_timeout``."""

    def __init__(self, key: str, wait_timeout: float, holder: str | None,
                 holder_remaining: float | None = None) -> None:
        self.key = key
        self.wait_timeout = wait_timeout
        self.holder = holder
        self.holder_remaining = holder_remaining
        who = holder if holder else "an unknown holder (it may have just released)"
        tail = ""
        if holder_remaining is not None and holder_remaining >= 0:
            tail = f"; its lease ends in {holder_remaining:.2f}s"
        super().__init__(f"txnsafety: could not acquire lock {key!r} within {wait_timeout:g}s: "
                         f"held by {who}{tail}")


class BackendUnavailable(LockError):
    """The lock backend could not be reached or answered with an error.

    Raised when the failure policy is ``fail_closed``; with ``fail_open`` the
    caller gets an *unverified* lease instead.
    """

    def __init__(self, key: str, backend: str, cause: BaseException | None = None) -> None:
        self.key = key
        self.backend = backend
        super().__init__(f"txnsafety: lock backend {backend} failed for lock {key!r}: {cause!r}")


class LeaseLost(LockError):
    """The lease is no longer held (expired, evicted, renewal failed, released)."""

    def __init__(self, key: str, state: str, why: str = "") -> None:
        self.key = key
        self.state = state
        super().__init__(f"txnsafety: lease on lock {key!r} is {state}" + (f": {why}" if why else ""))


class NotHolder(LockError):
    """Release or extend attempted by someone who does not hold the lease."""

    def __init__(self, key: str, action: str) -> None:
        self.key = key
        super().__init__(f"txnsafety: refused to {action} lock {key!r}: caller does not hold it")
