"""What every lock backend provides, and how a URL picks one.

A backend stores one value per held lock (the lease token), grants the lock to one
acquirer at a time, and only lets the token's owner release or extend it.  The
API layer (:mod:`txnsafety.locks.api`) turns a :class:`Grant` into a
:class:`~txnsafety.locks.lease.Lease`; backends never touch context variables.

Backends implement both blocking and ``async`` methods.  The default ``a*``
methods run the blocking ones in a worker thread, which is correct for every
backend; Redis, PostgreSQL and memory override them with native async code.
"""
from __future__ import annotations

import asyncio
import functools
import threading
from types import SimpleNamespace
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import urlsplit

from ..context import Priority

if TYPE_CHECKING:  # pragma: no cover
    from .lease import Lease


@dataclass(slots=True)
class AcquireRequest:
    """One acquisition attempt, as the backend sees it."""

    key: str              # the user's key, for messages
    backend_key: str      # namespaced key ("user:42")
    token: str
    owner: str
    lease_seconds: float
    wait_timeout: float   # 0 = try once
    priority: Priority


@dataclass(slots=True)
class Grant:
    """A successful acquisition."""

    fence: int
    #: monotonic deadline if the backend knows it exactly (memory), else None
    deadline: float | None = None
    #: monotonic time the successful backend call started (deadline = start + lease)
    start: float = 0.0
    waited: float = 0.0
    #: owner we waited for (first holder seen), for the contention log
    waited_on: str | None = None
    handle: Any = None


class Backend:
    """Base class; see the module docstring for the contract."""

    scheme = "?"

    def __init__(self, url: str) -> None:
        self.url = url

    @functools.cached_property
    def name(self) -> str:
        """URL without credentials, safe for logs."""
        parts = urlsplit(self.url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{host}{port}{parts.path}"

    # -- blocking ---------------------------------------------------------------
    def acquire(self, req: AcquireRequest) -> Grant:
        """Acquire or raise LockTimeout / BackendUnavailable."""
        raise NotImplementedError

    def release(self, lease: "Lease") -> bool:
        """Compare-and-delete.  True if ``lease`` still held the lock."""
        raise NotImplementedError

    def extend(self, lease: "Lease", seconds: float) -> bool:
        """Compare-and-extend.  True if ``lease`` still held the lock."""
        raise NotImplementedError

    def is_held(self, lease: "Lease") -> bool:
        raise NotImplementedError

    def holder(self, backend_key: str) -> str | None:
        """Owner description of the current holder, or None."""
        raise NotImplementedError

    def abandon(self, lease: "Lease") -> None:
        """Forget a lease without a network call (used by cleanups that cannot block)."""

    def close(self) -> None:
        """Drop connections."""

    # -- async (default: a worker thread) ------------------------------------------
    async def aacquire(self, req: AcquireRequest) -> Grant:
        attempt = asyncio.ensure_future(asyncio.to_thread(self.acquire, req))
        try:
            return await asyncio.shield(attempt)
        except asyncio.CancelledError:
            # The worker thread cannot be stopped: should it still win the lock,
            # give the lock back at once instead of holding it to the lease's end.
            attempt.add_done_callback(lambda done: self._give_back(req, done))
            raise

    def _give_back(self, req: AcquireRequest, attempt: "asyncio.Future[Grant]") -> None:
        if attempt.cancelled() or attempt.exception() is not None:
            return
        grant = attempt.result()
        orphan = SimpleNamespace(key=req.key, backend_key=req.backend_key, token=req.token,
                                 handle=grant.handle, fence=grant.fence)
        # A blocking release must not run on the event loop: a thread of its own.
        threading.Thread(target=self._release_quietly, args=(orphan,), daemon=True).start()

    def _release_quietly(self, orphan: Any) -> None:
        try:
            self.release(orphan)
        except Exception:  # the lease still ends by itself at its deadline
            pass

    async def arelease(self, lease: "Lease") -> bool:
        return await asyncio.to_thread(self.release, lease)

    async def aextend(self, lease: "Lease", seconds: float) -> bool:
        return await asyncio.to_thread(self.extend, lease, seconds)

    async def ais_held(self, lease: "Lease") -> bool:
        return await asyncio.to_thread(self.is_held, lease)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


_factories: dict[str, Callable[[str], Backend]] = {}


def register_backend(scheme: str, factory: Callable[[str], Backend]) -> None:
    """Make ``scheme://`` URLs build backends with ``factory(url)``."""
    _factories[scheme] = factory


def redacted_url(url: str) -> str:
    """``url`` with its password replaced by ``***``, for messages and reports."""
    parts = urlsplit(url)
    if not parts.password:
        return url
    host = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=f"{parts.username or ''}:***@{host}").geturl()


def backend_from_url(url: str) -> Backend:
    """Build a backend for ``url`` (``memory://``, ``redis://``, ``memcached://``, ``postgresql://``)."""
    scheme = urlsplit(url).scheme
    if scheme not in _factories:
        _load_builtin(scheme)
    try:
        factory = _factories[scheme]
    except KeyError:
        raise ValueError(f"txnsafety: no lock backend for URL scheme {scheme!r} "
                         f"(known: memory, redis, rediss, memcached, postgresql)") from None
    return factory(url)


_BUILTIN = ("memory", "redis", "rediss", "unix", "memcached", "memcache", "postgresql", "postgres")


def known_scheme(url: str) -> bool:
    """True when some backend handles ``url``'s scheme (without importing its client)."""
    scheme = urlsplit(url).scheme
    return scheme in _factories or scheme in _BUILTIN


def _load_builtin(scheme: str) -> None:
    # Imported lazily so that a missing client library only matters when used.
    if scheme == "memory":
        from .memory import MemoryBackend
        register_backend("memory", MemoryBackend)
    elif scheme in ("redis", "rediss", "unix"):
        from .redis_backend import RedisBackend
        for s in ("redis", "rediss", "unix"):
            register_backend(s, RedisBackend)
    elif scheme in ("memcached", "memcache"):
        from .memcached_backend import MemcachedBackend
        register_backend("memcached", MemcachedBackend)
        register_backend("memcache", MemcachedBackend)
    elif scheme in ("postgresql", "postgres"):
        from .postgres_backend import PostgresBackend
        register_backend("postgresql", PostgresBackend)
        register_backend("postgres", PostgresBackend)
