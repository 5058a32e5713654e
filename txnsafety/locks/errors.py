"""Exceptions of the lock service.

Every exception names the lock key, so a log line alone tells an operator which
lock was in trouble; :class:`LockTimeout` also names who held it, because "who is
in my way" is the first question anyone asks about contention.  All of them
pickle (their ``args`` are their constructor arguments), so they cross process
boundaries intact.
"""
from __future__ import annotations


class LockError(Exception):
    """Base class of every lock-service error."""


class LockTimeout(LockError):
    """The lock was not acquired within ``wait_timeout``."""

    def __init__(self, key: str, wait_timeout: float, holder: str | None,
                 holder_remaining: float | None = None) -> None:
        super().__init__(key, wait_timeout, holder, holder_remaining)
        self.key = key
        self.wait_timeout = wait_timeout
        self.holder = holder
        self.holder_remaining = holder_remaining

    def __str__(self) -> str:
        who = self.holder if self.holder else "an unknown holder (it may have just released)"
        tail = ""
        if self.holder_remaining is not None and self.holder_remaining >= 0:
            tail = f"; its lease ends in {self.holder_remaining:.2f}s"
        return (f"txnsafety: could not acquire lock {self.key!r} within {self.wait_timeout:g}s: "
                f"held by {who}{tail}")


class BackendUnavailable(LockError):
    """The lock backend could not be reached or answered with an error.

    Raised when the failure policy is ``fail_closed``; with ``fail_open`` the
    caller gets an *unverified* lease instead.
    """

    def __init__(self, key: str, backend: str, cause: BaseException | None = None) -> None:
        super().__init__(key, backend, cause)
        self.key = key
        self.backend = backend
        self.cause = cause

    def __str__(self) -> str:
        return f"txnsafety: lock backend {self.backend} failed for lock {self.key!r}: {self.cause!r}"


class LeaseLost(LockError):
    """The lease is no longer held (expired, evicted, renewal failed, released)."""

    def __init__(self, key: str, state: str, why: str = "") -> None:
        super().__init__(key, state, why)
        self.key = key
        self.state = state
        self.why = why

    def __str__(self) -> str:
        why = f": {self.why}" if self.why else ""
        return f"txnsafety: lease on lock {self.key!r} is {self.state}{why}"


class NotHolder(LockError):
    """Release or extend attempted by someone who does not hold the lease."""

    def __init__(self, key: str, action: str) -> None:
        super().__init__(key, action)
        self.key = key
        self.action = action

    def __str__(self) -> str:
        return f"txnsafety: refused to {self.action} lock {self.key!r}: caller does not hold it"
