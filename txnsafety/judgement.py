"""The full judgement of a write that may be wrong, and the quick test that most writes pass.

:func:`txnsafety.checker.write` asks :func:`cannot_stomp` first: the common, safe
write (read and written in one transaction that prevents lost updates) is answered
by a few tests on plain tuples and builds nothing.  Any other write is judged in
full by :class:`Judgement`, which reports violations with their sites filled in.
Kept apart from the checker's entry points so that each module has one job: the
read stamps (:mod:`txnsafety.stamps`), the write's bookkeeping
(:mod:`txnsafety.checker`), and here the rules (TXN101-104, 109-112).
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Callable, Iterator

from .codes import Code
from .context import RequestScope, Transaction, find_lease, held_leases
from .policies import Policy, Protection
from .report import Violation, model_name, report
from .sites import Site, site_from, sites_wanted, user_trace, wants_site

if TYPE_CHECKING:
    from .stamps import ReadStamp

_TRANSACTION, _TRANSACTION_OR_LOCK = Protection.TRANSACTION, Protection.TRANSACTION_OR_LOCK
_NOTHING, _FORBIDDEN = Protection.NOTHING, Protection.FORBIDDEN

#: An integration's site finder: ``(frame, entity) -> (write site, framework-internal)``.
Locate = Callable[[Any, Any], "tuple[Site | None, bool]"]


# -- single writer --------------------------------------------------------------

_single_writer: ContextVar[str | None] = ContextVar("txnsafety_single_writer", default=None)


@contextmanager
def single_writer(name: str = "cron") -> Iterator[None]:
    """Mark the block as the one writer of ``@written_by_single_writer(name)`` models."""
    token = _single_writer.set(name)
    try:
        yield
    finally:
        _single_writer.reset(token)


# -- the judgement ------------------------------------------------------------------

def cannot_stomp(policy: Policy, entry: tuple[Any, ...] | None, txn: Transaction | None, created: bool,
                 versioned: bool, written: frozenset[str] | None, history: dict[int, tuple[Any, ...]] | None,
                 me: int) -> bool:
    """True when :meth:`Judgement.judge` would report nothing: the common, safe write.

    It asks the same questions in the same terms, only without building the
    judgement; anything it does not answer for sure (a lock policy, a rare
    policy) returns False and goes to the full judgement.  ``entry`` is the read
    stamp (a ReadStamp-shaped tuple), ``history`` the row's writes so far.
    """
    protection = policy.protection
    if protection is _FORBIDDEN or (policy.single_writer is not None
                                    and _single_writer.get() != policy.single_writer):
        return False
    if entry is None or created:
        return True  # nothing read: no read-side protection to check (and no re-write of a loaded entity)
    if policy.forbid_rewrite:
        return False
    if versioned or policy.versioned_field:
        return True
    _, read_tick, read_txn, _, _, for_update, stale_lock = entry
    if stale_lock:
        return False
    if protection is _TRANSACTION or protection is _TRANSACTION_OR_LOCK:
        if (read_txn is None or txn is None or read_txn.root_id != txn.root_id
                or not (txn.prevents_lost_update or for_update)):
            return False  # the transaction does not protect it (a lock might: see Judgement)
    elif protection is not _NOTHING:
        return False  # a user lock: judged in full
    return not (policy.internal and history and erased_write(history, me, read_tick, written) is not None)


def erased_write(history: dict[int, tuple[Any, ...]], me: int, read_tick: int,
                 mine: frozenset[str] | None) -> tuple[Any, ...] | None:
    """The write of another object for the same row, made after this object was read,
    that this write erases (TXN103); None when there is none.

    ``history`` is in write order (see :func:`txnsafety.checker.write`), so the scan starts at the
    latest write and stops at the first one older than the read.
    """
    for obj_id, record in reversed(history.items()):
        if record[0] < read_tick:
            break  # every older write happened before this object was read
        if obj_id == me:
            continue
        since = [name for name, tick in record[1].items() if tick > read_tick]  # written after the read
        if mine is None or None in since or not mine.isdisjoint(since):
            return record
        # only fields this write leaves alone (disjoint partial writes do not erase each other)
    return None


class Judgement:
    """One write being judged in full; builds violations with the sites filled in."""

    __slots__ = ("entity", "scope", "model", "key", "policy", "stamp", "txn", "created", "site", "history",
                 "frame", "locate", "sent", "internal")

    def __init__(self, entity: Any, scope: RequestScope, model: type, key: Any, policy: Policy,
                 stamp: ReadStamp | None, txn: Transaction | None, created: bool,
                 history: dict[int, tuple[Any, ...]] | None, frame: Any, locate: Locate | None = None,
                 sent: frozenset[str] | None = None) -> None:
        self.entity, self.scope, self.model, self.key, self.policy = entity, scope, model, key, policy
        self.stamp, self.txn, self.created = stamp, txn, created
        self.site: Site | None = None  # found on demand: see where_written()
        self.history = history  # the row's writes so far (None: none)
        self.frame = frame  # the caller of record_write: where the sites are looked for
        self.locate = locate  # the integration's own site finder (see write())
        self.sent = sent  # the columns the write sends (None: the whole row), for the report
        self.internal = False  # the framework's own write (found with the site): not reported

    def judge(self, written: frozenset[str] | None, versioned: bool) -> Site | None:
        """Every check, in order (each may report; in raise mode the first one raises).

        Returns the site to remember the write by (see :func:`txnsafety.checker.write`).
        """
        self.check_policy()
        stamp, policy = self.stamp, self.policy
        if stamp is not None and not self.created and not (versioned or policy.versioned_field):
            self.check_protection()
            if stamp.stale_lock:
                self.violation(Code.TXN112, "the row was locked FOR UPDATE after this object was loaded, but "
                               "the object kept its old values (no refresh / populate_existing); the write "
                               "stomps on whatever changed in between")
            if policy.internal:
                self.check_internal(written)
        return self.where_written() if wants_site(self.model) else self.site

    def violation(self, code: Code, message: str, other: Site | None = None, **detail: str) -> None:
        write_site = self.where_written()
        if self.internal:
            return  # the framework's own bookkeeping (Django's update_last_login...): not the application's
        sites_wanted.add(self.model)  # adaptive read sites: from now on, this model's reads are located
        detail.setdefault("fields written", "the whole row" if self.sent is None else ", ".join(sorted(self.sent)))
        report(Violation(
            code, message, model_name(self.model), None if self.key is None else str(self.key),
            read_site=self.stamp.site if self.stamp else None, write_site=write_site,
            other_write_site=other, detail=detail, trace=user_trace(frame=self.frame),
            request_id=self.scope.id))

    def check_policy(self) -> None:
        policy = self.policy
        if policy.protection is Protection.FORBIDDEN:
            self.violation(Code.TXN110, f"model is declared @{policy.name} and must not be written")
        elif policy.forbid_rewrite and self.stamp is not None and not self.created:
            self.violation(Code.TXN110, "model is declared @written_once but an entity read from the "
                           "database is written again")
        elif policy.single_writer is not None and _single_writer.get() != policy.single_writer:
            self.violation(Code.TXN110, f"model is declared @written_by_single_writer({policy.single_writer!r}) "
                           f"but is written outside txnsafety.single_writer({policy.single_writer!r})")

    def check_protection(self) -> None:
        protection = self.policy.protection
        if protection is Protection.TRANSACTION:
            problem = self._transaction_problem()
        elif protection is Protection.USER_LOCK:
            problem = self._lock_problem()
        elif protection is Protection.TRANSACTION_OR_LOCK:
            txn_problem = self._transaction_problem()
            lock_problem = self._lock_problem() if txn_problem else None
            problem = None if txn_problem is None or lock_problem is None else (
                lock_problem if self._lock_in_play() else txn_problem)
        else:
            problem = None
        if problem is not None:
            self.violation(*problem)

    def _transaction_problem(self) -> tuple[Code, str] | None:
        assert self.stamp is not None
        read_txn, write_txn = self.stamp.transaction, self.txn
        if read_txn is None and write_txn is None:
            return Code.TXN102, "read, modified and written with no transaction or lock at all"
        if read_txn is None:
            return Code.TXN101, "read outside any transaction, written inside one: move the read inside"
        if write_txn is None:
            return Code.TXN104, f"read in transaction #{read_txn.root_id}, written after it ended"
        if read_txn.root_id != write_txn.root_id:
            return Code.TXN104, (f"read in transaction #{read_txn.root_id}, written in another "
                                 f"transaction #{write_txn.root_id}: re-read inside the writing one")
        if not (write_txn.prevents_lost_update or self.stamp.for_update):
            return Code.TXN109, (f"read-modify-write inside a {write_txn.isolation} transaction, which does not "
                                 "prevent lost updates: read the row FOR UPDATE, use a version column or an "
                                 "atomic UPDATE, or raise the isolation level")
        return None

    def _lock_in_play(self) -> bool:
        assert self.stamp is not None
        return bool(self.stamp.leases or held_leases())

    def _lock_problem(self) -> tuple[Code, str] | None:
        assert self.stamp is not None
        if self.policy.lock_id_fn is not None:
            lock_id = self.policy.lock_id(self.entity)
            read_lease = next((lease for lease in reversed(self.stamp.leases) if lease.key == lock_id), None)
            write_lease = find_lease(lock_id)
        else:  # strict default: any lease held at both ends
            lock_id = "(any)"
            read_lease = self.stamp.leases[-1] if self.stamp.leases else None
            write_lease = read_lease if read_lease is not None and read_lease in held_leases() else (
                held_leases()[-1] if held_leases() else None)
        if read_lease is None and write_lease is None:
            return Code.TXN102, f"read, modified and written without the user write lock {lock_id!r}"
        if read_lease is None:
            return Code.TXN101, (f"read outside the user write lock {lock_id!r}, written under it: "
                                 "use fetch_under_lock() or move the read inside the lock")
        if write_lease is not read_lease:
            return Code.TXN104, (f"read under the lock {lock_id!r} (fence {read_lease.fence}) but written "
                                 + ("after it was released" if write_lease is None else
                                    f"under a later acquisition (fence {write_lease.fence})"))
        if not write_lease.is_live():
            return Code.TXN104, (f"the lease on {lock_id!r} (fence {write_lease.fence}) expired or was lost "
                                 "before the write: another holder may have written in between")
        if not write_lease.verified:
            return Code.TXN111, (f"the lock {lock_id!r} was granted unverified (the lock backend failed open), "
                                 "so nothing kept concurrent writers out")
        return None

    def check_internal(self, mine: frozenset[str] | None) -> None:
        assert self.stamp is not None
        history = self.history
        if not history:
            return
        other = erased_write(history, id(self.entity), self.stamp.tick, mine)
        if other is not None:
            self.violation(Code.TXN103, "two Python objects for the same row were both written in this request; "
                           "this write erases the other one's change (it was read before that write): "
                           "pass one object around instead of re-reading", other=other[2])

    def where_written(self) -> Site | None:
        """The user's write site (one stack walk, done at most once per write)."""
        if self.site is None:
            if self.locate is not None:
                self.site, self.internal = self.locate(self.frame, self.entity)
            else:
                self.site = site_from(self.frame)
        return self.site
