"""The public lock API: ``user_write_lock``, ``global_lock``, ``fetch_under_lock``.

One context object serves ``with`` and ``async with`` with the same semantics.
State lives in :mod:`contextvars` (via :mod:`txnsafety.context`), so a lock taken
in a request is visible to the checker in every thread hop and child task of that
request, and never leaks into the next request.

Why user locks are re-entrant and global locks are not: a user lock protects
"everything about user 42" and helpers deep in the call stack take it again
without knowing their caller already did (Khan's seed); a global lock is the
low-level primitive and nesting it is almost always a bug, so it blocks (and
times out, naming the holder: yourself).
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

from ..context import Priority, enter_lease, exit_lease, held_leases, request_of_locks
from .backend import AcquireRequest, Backend
from .config import FAIL_OPEN, POLICIES, get_backend, options
from .errors import BackendUnavailable, LockTimeout
from .lease import Lease, LeaseState, Owner
from . import observe
from .observe import emit, record_order
from .renewal import TaskRenewer, ThreadRenewer

log = logging.getLogger("txnsafety.locks")

_UNSET: Any = object()
_PRIORITIES = {p.value: p for p in Priority}


class LockContext:
    """``with`` / ``async with`` a lock; yields the :class:`Lease`.

    One object per use: build it with :func:`user_write_lock` or
    :func:`global_lock` at the ``with`` statement.
    """

    def __init__(self, key: Any, *, kind: str, reentrant: bool, wait_timeout: float | None,
                 lease: float | None, priority: Priority | str | None, on_backend_error: str | None,
                 renew: bool | float | None, backend: str | Backend | None) -> None:
        opts = options()
        self.key = str(key)
        self.kind = kind
        self.reentrant = reentrant
        self.backend_key = (opts.user_prefix + self.key) if kind == "user" else self.key
        self._wait_timeout = wait_timeout
        self.lease_seconds = float(lease if lease is not None else opts.lease)
        if self.lease_seconds <= 0:
            raise ValueError("txnsafety: lease must be positive")
        self._priority = (priority if isinstance(priority, Priority) or priority is None
                          else (_PRIORITIES.get(priority) if isinstance(priority, str) else None)
                          or Priority(priority))
        self.on_backend_error = on_backend_error or opts.on_backend_error
        if self.on_backend_error not in POLICIES:
            raise ValueError(f"txnsafety: on_backend_error must be one of {POLICIES}")
        self.renew = opts.renew if renew is None else renew
        self._backend_arg = backend
        self._lease: Lease | None = None
        self._nested = False
        self._renewer: ThreadRenewer | TaskRenewer | None = None
        self._cleanup: Any = None

    # -- helpers ---------------------------------------------------------------------
    @property
    def lease(self) -> Lease | None:
        return self._lease

    def _reuse(self, backend: Backend) -> Lease | None:
        if not self.reentrant:
            return None
        for lease in reversed(held_leases()):
            if (isinstance(lease, Lease) and lease.key == self.key and lease.kind == "user"
                    and lease.backend is backend and lease.is_live()):
                with lease._mutex:
                    lease.depth += 1
                self._lease, self._nested = lease, True
                return lease
        return None

    def _request(self) -> tuple[AcquireRequest, Owner, Any]:
        scope = request_of_locks()
        priority = self._priority or (scope.priority if scope is not None else options().default_priority)
        wait = self._wait_timeout if self._wait_timeout is not None else options().wait_for(priority)
        owner = Owner.here(scope.id if scope is not None else None)
        # 128 random bits from the OS CSPRNG (what secrets.token_hex(16) returns)
        req = AcquireRequest(self.key, self.backend_key, os.urandom(16).hex(), str(owner),
                             self.lease_seconds, float(wait), priority)
        return req, owner, scope

    def _held_keys(self) -> list[str]:
        held = held_leases()
        return [lease.key for lease in held] if held else []

    def _failed_open(self, req: AcquireRequest, owner: Owner, backend: Backend,
                     exc: BackendUnavailable) -> Lease:
        log.warning("txnsafety: lock backend %s failed for lock %r; failing open with an UNVERIFIED "
                    "lease (writes under it are reported): %s", backend.name, self.key, exc,
                    extra={"txnsafety_lock": {"event": "fail_open", "key": self.key}})
        emit("backend_error", key=self.key, backend=backend.name, policy=FAIL_OPEN)
        now = time.monotonic()
        return Lease(key=self.key, backend_key=self.backend_key, token=req.token, fence=0, owner=owner,
                     lease_seconds=self.lease_seconds, deadline=now + self.lease_seconds,
                     state=LeaseState.UNVERIFIED, priority=req.priority, kind=self.kind, backend=backend)

    def _timed_out(self, exc: LockTimeout, backend: Backend, req: AcquireRequest) -> None:
        log.warning("%s", exc, extra={"txnsafety_lock": {
            "event": "timeout", "key": self.key, "holder": exc.holder, "priority": req.priority.value,
            "waited": req.wait_timeout}})
        emit("timeout", key=self.key, backend=backend.name, priority=req.priority.value,
             waited=req.wait_timeout, holder=exc.holder)

    def _closed_error(self, exc: BackendUnavailable, backend: Backend) -> None:
        log.error("%s (failing closed)", exc)
        emit("backend_error", key=self.key, backend=backend.name, policy="fail_closed")

    def _make_lease(self, req: AcquireRequest, owner: Owner, backend: Backend, grant: Any) -> Lease:
        deadline = grant.deadline if grant.deadline is not None else grant.start + self.lease_seconds
        lease = Lease(key=self.key, backend_key=self.backend_key, token=req.token, fence=grant.fence,
                      owner=owner, lease_seconds=self.lease_seconds, deadline=deadline,
                      state=LeaseState.HELD, priority=req.priority, kind=self.kind, backend=backend,
                      waited=grant.waited, handle=grant.handle)
        if grant.waited_on is not None or grant.waited > 0.001:
            log.info("txnsafety: lock %r acquired after waiting %.3fs on %s (%s, by %s)",
                     self.key, grant.waited, grant.waited_on or "another holder", req.priority.value,
                     owner, extra={"txnsafety_lock": {
                         "event": "contention", "key": self.key, "waited": grant.waited,
                         "waited_on": grant.waited_on, "priority": req.priority.value,
                         "waiter": str(owner)}})
        if observe._hooks:
            emit("acquired", key=self.key, backend=backend.name, priority=req.priority.value,
                 waited=grant.waited, contended=grant.waited_on is not None, fence=grant.fence)
        return lease

    def _register(self, lease: Lease, scope: Any, held: list[str]) -> None:
        self._lease = lease
        enter_lease(lease)
        if held:
            record_order(held, self.key)
        if scope is not None:
            def cleanup(lease: Lease = lease) -> None:
                _release_at_scope_end(lease)
            self._cleanup = cleanup
            scope.add_cleanup(cleanup)

    def _settle(self, outcome: Any, req: AcquireRequest, owner: Owner, backend: Backend,
                scope: Any, held: list[str]) -> Lease:
        """Turn what the backend answered (a grant, or its exception) into the lease.

        Shared by ``__enter__`` and ``__aenter__``: only the backend call differs.
        """
        if isinstance(outcome, LockTimeout):
            self._timed_out(outcome, backend, req)
            raise outcome
        if isinstance(outcome, BackendUnavailable):
            if self.on_backend_error != FAIL_OPEN:
                self._closed_error(outcome, backend)
                raise outcome
            lease = self._failed_open(req, owner, backend, outcome)
        else:
            lease = self._make_lease(req, owner, backend, outcome)
        self._register(lease, scope, held)
        return lease

    def _release_failed(self, err: BackendUnavailable) -> None:
        """The release's outcome is unknown (its reply was lost, the backend stalled).

        Not a stomp: the section ran while the lease was held and its work is
        done, so nothing is raised that would make a caller redo it.  The lock
        was released, or ends by itself with its lease.
        """
        log.warning("txnsafety: release of lock %r is in doubt (%s): the section's work is done, "
                    "do not redo it; the lock is free now or ends by itself with its lease",
                    self.key, err, extra={"txnsafety_lock": {"event": "release_in_doubt", "key": self.key}})
        emit("release_in_doubt", key=self.key, backend=err.backend)
        return None

    # -- sync ---------------------------------------------------------------------
    def __enter__(self) -> Lease:
        backend = get_backend(self._backend_arg)
        lease = self._reuse(backend)
        if lease is not None:
            return lease
        req, owner, scope = self._request()
        held = self._held_keys()
        try:
            outcome: Any = backend.acquire(req)
        except (LockTimeout, BackendUnavailable) as exc:
            outcome = exc
        lease = self._settle(outcome, req, owner, backend, scope, held)
        if self.renew and lease.state is LeaseState.HELD:
            self._renewer = ThreadRenewer(lease, self.renew)
        return lease

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        lease, self._lease = self._lease, None
        if lease is None:
            return
        if not self._begin_exit(lease):
            return
        if self._renewer is not None:
            self._renewer.stop()
            self._renewer = None
        ok: bool | None = True
        if lease.state is LeaseState.HELD:
            try:
                ok = lease.backend.release(lease)
            except BackendUnavailable as err:
                ok = self._release_failed(err)
        self._end_exit(lease, ok, exc_type is not None)

    # -- async --------------------------------------------------------------------
    async def __aenter__(self) -> Lease:
        backend = get_backend(self._backend_arg)
        lease = self._reuse(backend)
        if lease is not None:
            return lease
        req, owner, scope = self._request()
        held = self._held_keys()
        try:
            outcome: Any = await backend.aacquire(req)
        except (LockTimeout, BackendUnavailable) as exc:
            outcome = exc
        lease = self._settle(outcome, req, owner, backend, scope, held)
        if self.renew and lease.state is LeaseState.HELD:
            self._renewer = TaskRenewer(lease, self.renew)
        return lease

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        lease, self._lease = self._lease, None
        if lease is None:
            return
        if not self._begin_exit(lease):
            return
        renewer, self._renewer = self._renewer, None
        if isinstance(renewer, TaskRenewer):
            await renewer.astop()
        ok: bool | None = True
        if lease.state is LeaseState.HELD:
            try:
                ok = await lease.backend.arelease(lease)
            except asyncio.CancelledError:
                # Cancelled mid-release: the lease ends by itself at its deadline at
                # the latest; do the bookkeeping and let the cancellation through.
                self._end_exit(lease, True, True)
                raise
            except BackendUnavailable as err:
                ok = self._release_failed(err)
        self._end_exit(lease, ok, exc_type is not None)

    # -- shared exit logic ------------------------------------------------------------
    def _begin_exit(self, lease: Lease) -> bool:
        """Count down a nested use; True when this exit must release."""
        with lease._mutex:
            lease.depth -= 1
            if lease.depth > 0:
                return False
        exit_lease(lease)
        scope = request_of_locks()
        if self._cleanup is not None:
            if scope is not None:
                scope.discard_cleanup(self._cleanup)
            self._cleanup = None
        return True

    def _end_exit(self, lease: Lease, ok: bool | None, exc_in_flight: bool) -> None:
        now = time.monotonic()
        before = lease.state
        late = now - lease.deadline
        if before is LeaseState.UNVERIFIED:
            lease.state = LeaseState.RELEASED
            emit("released", key=self.key, held_for=now - lease.acquired_at, ok=False)
            return
        ended = before is LeaseState.LOST or ok is False or late >= 0
        # ok None: the release is in doubt but the lease had not ended -- released
        lease.state = LeaseState.LOST if ended else LeaseState.RELEASED
        if observe._hooks:
            emit("released", key=self.key, held_for=now - lease.acquired_at, ok=not ended)
        if ended:
            _report_ended(lease, late, exc_in_flight,
                          "the renewal failed" if before is LeaseState.LOST else
                          "the backend no longer held it" if ok is False and late < 0 else
                          f"it expired {late:.3f}s before the release")


def _report_ended(lease: Lease, late: float, exc_in_flight: bool, why: str) -> None:
    """Report TXN104: the lease ended before the holder released it."""
    from ..codes import Code
    from ..report import StompingError, Violation, report
    from ..sites import user_site

    violation = Violation(
        Code.TXN104,
        f"the lease on lock {lease.key!r} ended before it was released ({why}); writes made "
        f"after that were not protected and may have stomped on the next holder's",
        "lock", lease.key, write_site=user_site(2),
        detail={"fence": str(lease.fence), "lease_seconds": f"{lease.lease_seconds:g}",
                "overrun_seconds": f"{max(late, 0.0):.3f}", "backend": lease.backend.name,
                "owner": str(lease.owner)})
    log.warning("txnsafety: lease on lock %r ended before release (%s)", lease.key, why,
                extra={"txnsafety_lock": {"event": "released_late", "key": lease.key}})
    try:
        report(violation)
    except StompingError:
        if not exc_in_flight:
            raise
        log.error("%s", violation)


def _release_at_scope_end(lease: Lease) -> None:
    """Cleanup run when a request ends with the lock still held (a missed exit)."""
    if lease.state not in (LeaseState.HELD, LeaseState.UNVERIFIED):
        return
    log.warning("txnsafety: lock %r was still held when request %s ended; releasing it",
                lease.key, lease.owner.request_id)
    lease.depth = 0
    if lease.state is LeaseState.HELD:
        try:
            lease.backend.release(lease)
        except Exception:
            lease.backend.abandon(lease)
    lease.state = LeaseState.RELEASED


def user_write_lock(lock_id: Any, *, wait_timeout: float | None = None, lease: float | None = None,
                    priority: Priority | str | None = None, on_backend_error: str | None = None,
                    renew: bool | float | None = None,
                    backend: str | Backend | None = None) -> LockContext:
    """The seed's user write lock: re-entrant within a request, checked by the checker.

    ``lock_id`` is what the model policy's lock-id function returns (``str()``
    is applied).  ``with user_write_lock(user.id) as lease: ...`` or
    ``async with``.  Nested uses in the same request (or in tasks it spawned)
    share one lease; the outermost exit releases.

    Options (defaults from :func:`txnsafety.locks.configure`): ``wait_timeout``
    seconds (default 10 interactive / 60 batch), ``lease`` seconds (default 60),
    ``priority`` (default: the request's; outside a request, batch),
    ``on_backend_error`` (``"fail_closed"`` or ``"fail_open"``), ``renew``
    (background renewal; a failed renewal marks the lease lost), ``backend``
    (URL or backend object; default the configured one).
    """
    return LockContext(lock_id, kind="user", reentrant=True, wait_timeout=wait_timeout, lease=lease,
                       priority=priority, on_backend_error=on_backend_error, renew=renew,
                       backend=backend)


def global_lock(key: Any, *, wait_timeout: float | None = None, lease: float | None = None,
                priority: Priority | str | None = None, on_backend_error: str | None = None,
                renew: bool | float | None = None,
                backend: str | Backend | None = None) -> LockContext:
    """A low-level, non-re-entrant lock on ``key`` (same options as :func:`user_write_lock`)."""
    return LockContext(key, kind="global", reentrant=False, wait_timeout=wait_timeout, lease=lease,
                       priority=priority, on_backend_error=on_backend_error, renew=renew,
                       backend=backend)
