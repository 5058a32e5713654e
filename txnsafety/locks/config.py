"""Process-wide defaults of the lock service: which backend, which timeouts.

Why one module: Django settings, an app factory and tests all configure the same
defaults with :func:`configure`; the environment variable ``TXNSAFETY_LOCK_URL``
picks the backend when nothing configures it (default ``memory://``).
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass, replace
from typing import Any

from ..context import Priority
from .backend import Backend, redacted_url
from .registry import backend_from_url, known_scheme

FAIL_CLOSED = "fail_closed"
FAIL_OPEN = "fail_open"
POLICIES = (FAIL_CLOSED, FAIL_OPEN)


@dataclass(frozen=True)
class LockOptions:
    """Defaults for every lock; each can be overridden per call."""

    #: Seconds to wait for the lock; None = by priority (below).
    wait_timeout: float | None = None
    #: Seed defaults: a person waits 10 s, a job 60 s.
    interactive_wait_timeout: float = 10.0
    batch_wait_timeout: float = 60.0
    #: Lease (lock timeout) in seconds: the lock ends by itself after this.
    lease: float = 60.0
    #: What to do when the backend fails: fail_closed (raise) or fail_open.
    on_backend_error: str = FAIL_CLOSED
    #: Renew the lease in the background: False, True (every lease/3 s) or seconds.
    renew: bool | float = False
    #: Priority outside any request scope (inside one, the scope's priority).
    default_priority: Priority = Priority.BATCH
    #: Backend key prefix of user write locks (global locks use the key as is).
    user_prefix: str = "user:"

    def wait_for(self, priority: Priority) -> float:
        if self.wait_timeout is not None:
            return self.wait_timeout
        return self.interactive_wait_timeout if priority is Priority.INTERACTIVE else self.batch_wait_timeout


_lock = threading.Lock()
_url: str = os.environ.get("TXNSAFETY_LOCK_URL", "memory://")
_options = LockOptions()
_backends: dict[str, Backend] = {}


def configure(url: str | None = None, **options: Any) -> LockOptions:
    """Set the default backend URL and/or default options.

    ``configure(url="redis://127.0.0.1:6379/0", lease=30, on_backend_error="fail_open")``.
    Unknown options raise ``TypeError`` now rather than being ignored.
    """
    global _url, _options
    if "on_backend_error" in options and options["on_backend_error"] not in POLICIES:
        raise ValueError(f"txnsafety: on_backend_error must be one of {POLICIES}, "
                         f"not {options['on_backend_error']!r}")
    if "default_priority" in options:
        options["default_priority"] = Priority(options["default_priority"])
    with _lock:
        if url is not None:
            if not known_scheme(url):
                raise ValueError(f"txnsafety: no lock backend for URL {redacted_url(url)!r} "
                                 "(memory://, redis://, rediss://, redis+sentinel://, redis+cluster://, "
                                 "memcached://, postgresql://)")
            _url = url
        if options:
            _options = replace(_options, **options)
        return _options


def options() -> LockOptions:
    return _options


def default_url() -> str:
    return _url


def get_backend(url: str | Backend | None = None) -> Backend:
    """The (cached) backend for ``url``, or the configured default."""
    if isinstance(url, Backend):
        return url
    url = url or _url
    backend = _backends.get(url)
    if backend is None:
        with _lock:
            backend = _backends.get(url)
            if backend is None:
                backend = _backends[url] = backend_from_url(url)
    return backend


def close_backends() -> None:
    """Close every cached backend (tests, process shutdown)."""
    with _lock:
        backends = list(_backends.values())
        _backends.clear()
    for b in backends:
        try:
            b.close()
        except Exception:  # pragma: no cover - best effort
            pass
