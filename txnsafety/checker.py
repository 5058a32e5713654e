"""Provenance: stamp every read, judge every write.

This is the seed's mechanism (Khan's ``_ts_get_nonce`` and
``_transaction_at_request_time``) made isolation- and lease-aware:

* a **read** of an entity whose model has a policy records a stamp: a per-request
  tick (the nonce), the transaction in force, the leases held, whether the row
  was read ``FOR UPDATE``, and the user's read site;
* a **write** compares that stamp with the transaction and leases in force now,
  checks the model's policy, and scans the per-key write history of the request
  for another Python object that wrote the same row after this one was read.

The public functions never raise into the host application, except
:class:`~txnsafety.report.StompingError` in ``raise`` mode.
"""
from __future__ import annotations

import functools
import logging
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, TypeVar

from .codes import Code
from .config import settings
from .context import (LeaseLike, RequestScope, Transaction, current_scope, current_transaction,
                      find_lease, held_leases)
from .context import _leases as _leases_var
from .context import _scope as _scope_var
from .context import _transactions as _transactions_var
from .policies import _cache as _policy_cache
from .policies import STRICT_DEFAULT, Policy, Protection, policy_of
from .report import StompingError, Violation, report
from .sites import Site, sites_wanted, user_site, user_trace, wants_site

log = logging.getLogger("txnsafety")

F = TypeVar("F", bound=Callable[..., Any])

#: Sentinel: "use the transaction of the current context".
CURRENT: Any = object()
_MISSING: Any = object()


@dataclass(slots=True)
class ReadStamp:
    """What was true when an entity was read."""

    tick: int
    transaction: Transaction | None
    leases: tuple[LeaseLike, ...]
    site: Site | None
    for_update: bool = False
    stale_lock: bool = False


@dataclass(slots=True)
class WriteRecord:
    """One write of a key in this request, for TXN103."""

    obj_id: int
    tick: int
    fields: frozenset[str] | None
    site: Site | None


def guarded(fn: F) -> F:
    """Log the checker's own failures instead of breaking the request.

    For integrations' event handlers too: only :class:`StompingError` (raise mode)
    gets through to the application.
    """
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except StompingError:
            raise
        except Exception:
            log.exception("txnsafety: internal error in %s (the request goes on)", fn.__name__)
            return None
    return wrapper  # type: ignore[return-value]


_model_names: dict[type, str] = {}


def model_name(model: type) -> str:
    """``module.QualName`` (Django models: ``app_label.Model``); cached per class."""
    name = _model_names.get(model)
    if name is None:
        label = getattr(getattr(model, "_meta", None), "label", None)
        name = label if isinstance(label, str) else f"{model.__module__}.{model.__qualname__}"
        _model_names[model] = name
    return name


def _policy(model: type) -> Policy | None:
    policy = policy_of(model)
    if policy is None and settings.strict:
        return STRICT_DEFAULT
    return policy


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


# -- reads --------------------------------------------------------------------------

def record_read(
    entity: Any,
    *,
    model: type | None = None,
    key: Any = None,
    transaction: Transaction | None = CURRENT,
    for_update: bool = False,
    site: Site | None = CURRENT,
) -> None:
    """Stamp ``entity`` as read now.  Call it for every entity a query returns.

    ``transaction`` defaults to the one in force in this context; integrations
    that track transactions themselves (Django, SQLAlchemy) pass their own.
    A ``FOR UPDATE`` read with no transaction is reported as TXN108 whatever the
    model's policy: the row lock is released the moment the statement ends.

    ``site`` is the user's read site when the caller already knows it: an
    integration finds it once per statement (:func:`txnsafety.sites.user_site`)
    and passes it for every row, instead of one stack walk per row.

    This is the hottest path of the checker (every entity of every query), so it
    is written flat: no decorator, contextvars read directly.
    """
    if not settings.enabled:
        return
    scope = _scope_var.get()
    if scope is None:
        return
    try:
        cls = model or type(entity)
        if transaction is CURRENT:
            stack = _transactions_var.get()
            transaction = stack[-1] if stack else None
        if for_update and transaction is None:
            _report_lock_outside_transaction(scope, cls, key)
        policy = _policy_cache.get(cls, _MISSING)
        if policy is _MISSING:
            policy = policy_of(cls)
        if policy is None and not settings.strict:
            return
        if site is CURRENT:
            site = user_site(1) if wants_site(cls) else None
        stamp(scope, entity, cls, transaction, for_update, site)
    except StompingError:
        raise
    except Exception:
        log.exception("txnsafety: internal error in record_read (the request goes on)")


def stamp(scope: RequestScope, entity: Any, model: type, transaction: Transaction | None,
          for_update: bool, site: Site | None) -> ReadStamp:
    """Record the read of ``entity`` in ``scope`` and return its stamp.

    The step :func:`record_read` ends with, for an integration's per-row hook that
    has already found the scope, the policy and the site itself (SQLAlchemy's load
    event); it reports nothing, so TXN108 still goes through :func:`record_read`.
    """
    made = ReadStamp(next(scope._clock), transaction, _leases_var.get(), site, for_update)
    scope.stamps[id(entity)] = (entity, made)
    return made


def _report_lock_outside_transaction(scope: RequestScope, model: type, key: Any) -> None:
    site = user_site(2)
    sites_wanted.add(model)
    report(Violation(
        Code.TXN108, "read FOR UPDATE outside any transaction: the row lock ends with the statement",
        model_name(model), None if key is None else str(key), read_site=site,
        request_id=scope.id))


@guarded
def record_stale_lock(entity: Any) -> None:
    """The row of ``entity`` was re-read FOR UPDATE but the object kept old values.

    (SQLAlchemy's identity map without ``populate_existing``.)  Writing it later
    stomps on whatever changed between the first read and the lock: TXN112.
    """
    scope = current_scope()
    entry = scope.stamps.get(id(entity)) if scope is not None else None
    if entry is not None:
        entry[1].stale_lock = True


def read_stamp(entity: Any) -> ReadStamp | None:
    """The stamp of ``entity`` in this request, if it was read (for integrations)."""
    scope = current_scope()
    entry = scope.stamps.get(id(entity)) if scope is not None else None
    return entry[1] if entry is not None else None


def forget(entity: Any) -> None:
    """Drop the stamp of ``entity`` (deleted, or a temporary the ORM threw away)."""
    scope = current_scope()
    if scope is not None:
        scope.stamps.pop(id(entity), None)


# -- writes ---------------------------------------------------------------------------

@guarded
def record_write(
    entity: Any,
    *,
    model: type | None = None,
    key: Any = None,
    fields: Iterable[str] | None = None,
    created: bool = False,
    transaction: Transaction | None = CURRENT,
    versioned: bool = False,
    history_model: type | None = None,
) -> None:
    """Judge a write of ``entity`` against its read stamp and the model's policy.

    ``fields`` is what the write sends (``None``: the whole row, as Django's
    ``save()``); ``created`` marks an insert of a new entity, which needs no
    read-side protection (as in the seed); ``versioned`` marks a write the data
    layer makes conditional on a version column (it cannot stomp).
    ``history_model`` names the table for TXN103 when it differs from the class
    whose policy applies (a Django proxy model and its concrete model share rows).
    """
    if not settings.enabled:
        return
    scope = current_scope()
    if scope is None:
        return
    cls = model or type(entity)
    policy = _policy(cls)
    if policy is None:
        return
    if key is None:
        key = getattr(entity, "pk", None) or getattr(entity, "id", None)
    txn = current_transaction() if transaction is CURRENT else transaction
    entry = scope.stamps.get(id(entity))
    stamp: ReadStamp | None = entry[1] if entry is not None else None
    write = _Write(entity, scope, cls, key, policy, stamp, txn, created, history_model or cls)

    write.check_policy()
    if stamp is None or created:
        write.remember(fields)
        return
    if not (versioned or policy.versioned_field):
        write.check_protection()
        if stamp.stale_lock:
            write.violation(Code.TXN112, "the row was locked FOR UPDATE after this object was loaded, but the "
                            "object kept its old values (no refresh / populate_existing); the write stomps "
                            "on whatever changed in between")
        if policy.internal:
            write.check_internal(fields)
    write.remember(fields)


class _Write:
    """One write being judged; builds violations with the sites filled in."""

    __slots__ = ("entity", "scope", "model", "key", "policy", "stamp", "txn", "created", "site", "history_key")

    def __init__(self, entity: Any, scope: RequestScope, model: type, key: Any, policy: Policy,
                 stamp: ReadStamp | None, txn: Transaction | None, created: bool,
                 history_model: type) -> None:
        self.entity, self.scope, self.model, self.key, self.policy = entity, scope, model, key, policy
        self.stamp, self.txn, self.created = stamp, txn, created
        self.site: Site | None = None  # found on demand: see where_written()
        self.history_key = (model_name(history_model), repr(key))

    def violation(self, code: Code, message: str, other: Site | None = None, **detail: str) -> None:
        sites_wanted.add(self.model)  # adaptive read sites: from now on, this model's reads are located
        report(Violation(
            code, message, model_name(self.model), None if self.key is None else str(self.key),
            read_site=self.stamp.site if self.stamp else None, write_site=self.where_written(),
            other_write_site=other, detail=detail, trace=user_trace(3),
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

    def check_internal(self, fields: Iterable[str] | None) -> None:
        assert self.stamp is not None
        mine = frozenset(fields) if fields is not None else None
        history = self.scope.writes.get(self.history_key)
        if not history:
            return
        me = id(self.entity)
        read_tick = self.stamp.tick
        for other in reversed(history.values()):  # latest write first (see remember())
            if other.tick < read_tick:
                break  # every older write happened before this object was read
            if other.obj_id == me:
                continue
            if mine is not None and other.fields is not None and not (mine & other.fields):
                continue  # disjoint partial writes do not erase each other
            self.violation(Code.TXN103, "two Python objects for the same row were both written in this request; "
                           "this write erases the other one's change (it was read before that write): "
                           "pass one object around instead of re-reading", other=other.site)
            return

    def remember(self, fields: Iterable[str] | None) -> None:
        """Keep the latest write of each object (its fields accumulated), in write
        order, so a later write scans only the writes made after its own read."""
        me = id(self.entity)
        history = self.scope.writes.setdefault(self.history_key, {})
        previous = history.pop(me, None)  # re-inserted last: the dict stays in write order
        written = frozenset(fields) if fields is not None else None
        if previous is not None and written is not None:
            written = None if previous.fields is None else previous.fields | written
        # a later TXN103 names this write as "the other write"
        site = self.where_written() if wants_site(self.model) else self.site
        history[me] = WriteRecord(me, self.scope.tick(), written, site)

    def where_written(self) -> Site | None:
        """The user's write site (one stack walk, done at most once per write)."""
        if self.site is None:
            self.site = user_site(4)
        return self.site
