"""What every lock backend provides.

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
import logging
import threading
from types import SimpleNamespace
from dataclasses import dataclass
from typing import Any, Callable, Protocol
from urllib.parse import urlsplit

from ..context import Priority

log = logging.getLogger("txnsafety.locks")
_givers_mutex = threading.Lock()


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


class HeldLock(Protocol):
    """What a backend reads from a held lock to release, extend or check it.

    A :class:`~txnsafety.locks.lease.Lease` is one; so is the stand-in a failed async
    acquire builds for a grant that never became a lease (:meth:`_Handoff._orphan`).
    The contract is written here, not as ``Lease``, so that backends depend on what
    they use and the lease (which calls its backend) is the one that imports the other.
    """

    key: str          # the user's key, for messages
    backend_key: str  # namespaced key ("user:42")
    token: str        # compared on every release and extend: only the holder's token works
    fence: int
    handle: Any       # backend-private state (the PostgreSQL connection); a backend may clear it


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

    def release(self, lease: HeldLock) -> bool:
        """Compare-and-delete.  True if ``lease`` still held the lock."""
        raise NotImplementedError

    def extend(self, lease: HeldLock, seconds: float) -> bool:
        """Compare-and-extend.  True if ``lease`` still held the lock."""
        raise NotImplementedError

    def is_held(self, lease: HeldLock) -> bool:
        raise NotImplementedError

    def holder(self, backend_key: str) -> str | None:
        """Owner description of the current holder, or None."""
        raise NotImplementedError

    def lost_locally(self, lease: HeldLock) -> bool:
        """True when the client alone can tell the lock is gone (no network round trip).

        For backends whose lock lives and dies with a connection (PostgreSQL
        sessions); the others cannot know without asking and answer False.
        """
        return False

    def _give_back_later(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` -- giving back a lock a failed acquire may have won -- in a
        thread of its own: against a stalled server it costs another timeout, which
        the failed acquire must not add to its caller's wait.  Not a daemon: a
        process that exits right after still gives the lock back."""
        giver = threading.Thread(target=fn, args=args, name="txnsafety-give-back")
        with _givers_mutex:
            givers = self.__dict__.setdefault("_givers", [])
            givers[:] = [t for t in givers if t.is_alive()] + [giver]
        giver.start()

    def join_give_backs(self, timeout: float | None = None) -> None:
        """Wait for the give-backs of failed acquires started so far (tests, shutdown)."""
        with _givers_mutex:
            givers = list(self.__dict__.get("_givers", ()))
        for giver in givers:
            giver.join(timeout)

    def abandon(self, lease: HeldLock) -> None:
        """Forget a lease without a network call (used by cleanups that cannot block)."""

    def close(self) -> None:
        """Drop connections."""

    # -- async (default: a worker thread) ------------------------------------------
    async def aacquire(self, req: AcquireRequest) -> Grant:
        """Run the blocking :meth:`acquire` in a worker thread.

        The thread cannot be stopped: if this coroutine ends without taking the
        result (its task cancelled, the event loop shutting down, the coroutine
        closed), the thread may still win the lock later.  The lock must then be
        given back at once, not held until the lease ends with no lease object to
        release it.  That give-back must not depend on the event loop, which may be
        gone by then, so caller and thread settle it between themselves with a
        :class:`_Handoff`: whichever of the two comes second releases the grant.
        """
        handoff = _Handoff(self, req)
        attempt = asyncio.ensure_future(asyncio.to_thread(handoff.run))
        taken = False
        try:
            grant = await asyncio.shield(attempt)
            taken = True
            return grant
        finally:
            if not taken:
                handoff.abandon()
                _retrieve_outcome(attempt)

    def _release_quietly(self, orphan: Any) -> None:
        """Release an orphaned grant with its own token; log, never raise."""
        try:
            released = self.release(orphan)
        except Exception as exc:  # the lease still ends by itself at its deadline
            log.info("txnsafety: could not give back lock %r won after its async caller was gone "
                     "(it ends with its lease): %s", orphan.key, exc)
        else:
            log.debug("txnsafety: gave back lock %r won after its async caller was gone (%s)",
                      orphan.key, "released" if released else "already ended")

    async def arelease(self, lease: HeldLock) -> bool:
        return await asyncio.to_thread(self.release, lease)

    async def aextend(self, lease: HeldLock, seconds: float) -> bool:
        return await asyncio.to_thread(self.extend, lease, seconds)

    async def ais_held(self, lease: HeldLock) -> bool:
        return await asyncio.to_thread(self.is_held, lease)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


class _Handoff:
    """Settles who owns a grant won by a worker thread whose async caller may be gone.

    Shared by :meth:`Backend.aacquire` (the caller, on the event loop) and the
    worker thread running the blocking ``acquire``.  One ``threading.Lock``
    orders the two outcomes that can race, without the event loop's help (it may
    have ended while the thread still polls):

    * the thread wins the lock first: it stores the grant (``handed``); from then
      on the caller owns it -- it returns it, or, if it leaves without taking it,
      releases it itself;
    * the caller leaves first: it sets ``gone``; a grant the thread wins after that
      is released by the thread with the grant's own token and CAS handle, so the
      "only the holder can release" rule holds.
    """

    __slots__ = ("backend", "req", "_mutex", "gone", "handed")

    def __init__(self, backend: Backend, req: AcquireRequest) -> None:
        self.backend = backend
        self.req = req
        self._mutex = threading.Lock()
        self.gone = False
        self.handed: Grant | None = None

    def run(self) -> Grant:
        """In the worker thread: acquire, then hand the grant over or give it back."""
        grant = self.backend.acquire(self.req)
        with self._mutex:
            if not self.gone:
                self.handed = grant
                return grant
        # The caller left while we polled: nobody will ever release this grant.
        self.backend._release_quietly(self._orphan(grant))
        return grant  # the result goes nowhere (the caller has left)

    def abandon(self) -> None:
        """On the event loop, when the caller leaves without taking the result.

        Marks the caller gone; if the thread already handed a grant over, the caller
        owns it and releases it -- in a thread of its own, since a blocking release
        must not run on the event loop.  The thread is not a daemon: a process that
        exits right after must still give the lock back (the release is one round
        trip, bounded by the backend's socket timeout).
        """
        with self._mutex:
            self.gone = True
            grant, self.handed = self.handed, None
        if grant is None:
            return  # the thread gives back whatever it wins from now on
        orphan = self._orphan(grant)
        try:
            threading.Thread(target=self.backend._release_quietly, args=(orphan,),
                             name="txnsafety-give-back").start()
        except RuntimeError:  # no new threads at interpreter shutdown: release here
            self.backend._release_quietly(orphan)

    def _orphan(self, grant: Grant) -> Any:
        """The fields ``release`` reads from a lease, for a grant that never became one."""
        req = self.req
        return SimpleNamespace(key=req.key, backend_key=req.backend_key, token=req.token,
                               handle=grant.handle, fence=grant.fence)


def _retrieve_outcome(attempt: "asyncio.Future[Grant]") -> None:
    """Mark the abandoned attempt's outcome as seen, so a LockTimeout the thread
    raises later is not logged as "exception was never retrieved"."""
    def consume(done: "asyncio.Future[Grant]") -> None:
        if not done.cancelled():
            done.exception()
    if attempt.done():
        consume(attempt)
    else:
        attempt.add_done_callback(consume)


def redacted_url(url: str) -> str:
    """``url`` with its password replaced by ``***``, for messages and reports."""
    parts = urlsplit(url)
    if not parts.password:
        return url
    host = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=f"{parts.username or ''}:***@{host}").geturl()
