"""Provenance: stamp every read, judge every write.

This is the seed's mechanism (Khan's ``_ts_get_nonce`` and
``_transaction_at_request_time``) made isolation- and lease-aware:

* a **read** of an entity whose model has a policy records a stamp: a per-request
  tick (the nonce), the transaction in force, the leases held, whether the row
  was read ``FOR UPDATE``, and the user's read site;
* a **write** compares that stamp with the transaction and leases in force now,
  checks the model's policy, and scans the per-key write history of the request
  for another Python object that wrote the same row after this one was read.

Reads and writes run for every row of every request, so their common case is
written flat and allocates only plain tuples: a stamp is kept as a tuple shaped
like :class:`ReadStamp`, a write as ``(tick, fields, site)``.  A write that cannot
be reported (the usual case: read and written in one transaction that prevents
lost updates) is remembered without building anything else; only a write that
may be wrong goes through the full judgement (:class:`_Write`).

The public functions never raise into the host application, except
:class:`~txnsafety.report.StompingError` in ``raise`` mode.
"""
from __future__ import annotations

import functools
import logging
import sys
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Protocol, Sequence, TypeVar

from .codes import Code
from .config import settings
from .context import LeaseLike, RequestScope, Transaction, current_scope, current_state, find_lease, held_leases
from .policies import STRICT_DEFAULT, Policy, Protection, cached_policy, policy_of
from .report import StompingError, Violation, report
from .sites import Site, site_from, sites_wanted, user_site, user_trace, wants_site

log = logging.getLogger("txnsafety")

F = TypeVar("F", bound=Callable[..., Any])

#: Sentinel: "use the transaction of the current context".
CURRENT: Any = object()
_MISSING: Any = object()

_TRANSACTION, _TRANSACTION_OR_LOCK = Protection.TRANSACTION, Protection.TRANSACTION_OR_LOCK
_NOTHING, _FORBIDDEN = Protection.NOTHING, Protection.FORBIDDEN


#: An integration's site finder: ``(frame, entity) -> (write site, framework-internal)``.
Locate = Callable[[Any, Any], "tuple[Site | None, bool]"]


class ReadStamp(NamedTuple):
    """What was true when an entity was read.

    The request keeps each read in ``RequestScope.stamps`` as a *plain* tuple of
    this shape (building a named tuple costs several times as much, on every row);
    the rows of one statement share one tuple (:func:`stamp_statement`), whose first
    field is then the statement's rows rather than the entity;
    :func:`read_stamp` turns it into a ``ReadStamp`` the first time it is asked for
    and keeps that, so asking twice gives the same object.  A stamp never changes:
    :func:`restamp` replaces it.
    """

    entity: Any
    tick: int
    transaction: Transaction | None
    leases: tuple[LeaseLike, ...]
    site: Site | None
    for_update: bool = False
    stale_lock: bool = False

    def __repr__(self) -> str:  # not the entity: its fields may be personal data
        return (f"ReadStamp(tick={self.tick}, transaction={self.transaction!r}, leases={self.leases!r}, "
                f"site={self.site!r}, for_update={self.for_update}, stale_lock={self.stale_lock})")


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
    is written flat: no decorator, one context-variable read, one plain tuple.
    """
    if not settings.enabled:
        return
    scope, transactions, leases = current_state()
    if scope is None:
        return
    try:
        cls = model or type(entity)
        if transaction is CURRENT:
            transaction = transactions[-1] if transactions else None
        if for_update and transaction is None:
            _report_lock_outside_transaction(scope, cls, key)
        policy = cached_policy(cls, _MISSING)
        if policy is _MISSING:
            policy = policy_of(cls)
        if policy is None and not settings.strict:
            return
        if site is CURRENT:  # no call while no model wants its sites (see sites.wants_site)
            site = user_site(1) if (sites_wanted or settings.read_sites == "always") and wants_site(cls) else None
        # a ReadStamp's fields, as a plain tuple (see ReadStamp)
        scope.stamps[id(entity)] = (entity, next(scope._clock), transaction, leases, site, for_update, False)
    except StompingError:
        raise
    except Exception:
        log.exception("txnsafety: internal error in record_read (the request goes on)")


def stamp(scope: RequestScope, entity: Any, transaction: Transaction | None, leases: tuple[LeaseLike, ...],
          for_update: bool, site: Site | None) -> None:
    """Record the read of ``entity`` in ``scope`` (a plain tuple shaped like :class:`ReadStamp`).

    The step :func:`record_read` ends with, for an integration's per-row hook that
    has already found the scope, the leases, the policy and the site itself (the
    SQLAlchemy load event, Django's ``from_db``); it reports nothing, so TXN108
    still goes through :func:`record_read`.
    """
    scope.stamps[id(entity)] = (entity, next(scope._clock), transaction, leases, site, for_update, False)


def stamp_statement(scope: RequestScope, entities: Sequence[Any], transaction: Transaction | None,
                    leases: tuple[LeaseLike, ...], for_update: bool, site: Site | None) -> None:
    """Record the read of every entity one statement returned: one read for all of them.

    A statement's rows are read at one instant, in one transaction, under the same
    leases, from the same site: they share one stamp tuple, whose first field holds
    the rows (a tuple: it keeps every entity, and so its ``id``, alive while the
    request lasts).  The mapping from each ``id`` to it is made by C loops
    (``dict.fromkeys(map(id, ...))``): no Python code runs per row.  A single row
    gets its own stamp, as :func:`stamp` makes it.
    """
    if len(entities) == 1:
        entity = entities[0]
        scope.stamps[id(entity)] = (entity, next(scope._clock), transaction, leases, site, for_update, False)
        return
    rows = tuple(entities)
    read = (rows, next(scope._clock), transaction, leases, site, for_update, False)
    scope.stamps.update(dict.fromkeys(map(id, rows), read))


def _report_lock_outside_transaction(scope: RequestScope, model: type, key: Any) -> None:
    site = user_site(2)
    sites_wanted.add(model)
    report(Violation(
        Code.TXN108, "read FOR UPDATE outside any transaction: the row lock ends with the statement",
        model_name(model), None if key is None else str(key), read_site=site,
        request_id=scope.id))


class DeferredReads(Protocol):
    """Reads an integration leaves on the objects themselves instead of in the scope.

    Stamping every loaded row into ``RequestScope.stamps`` is most of what checking a
    read costs, and most rows are never written.  An integration whose per-row hook
    can afford one attribute (SQLAlchemy: one tuple per statement, shared by its
    rows, left on each ``InstanceState``) registers a source; the checker takes a
    read from it when it is asked about the entity (:func:`read_stamp`,
    :func:`restamp`; the integration itself before a write).
    """

    def take(self, scope: RequestScope, entity: Any, entry: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
        """The read of ``entity`` in ``scope`` if it is newer than ``entry`` (a stamp tuple), else None."""

    def drop(self, scope: RequestScope, entity: Any) -> None:
        """Forget the read of ``entity`` in ``scope`` (see :func:`forget`)."""


_deferred: list[DeferredReads] = []


def add_deferred_reads(source: DeferredReads) -> None:
    """Register a source of reads kept on the objects (idempotent)."""
    if source not in _deferred:
        _deferred.append(source)


def remove_deferred_reads(source: DeferredReads) -> None:
    """Unregister a source (an integration uninstalled)."""
    if source in _deferred:
        _deferred.remove(source)


def _entry(scope: RequestScope, entity: Any) -> tuple[Any, ...] | None:
    """The stamp tuple of ``entity`` in ``scope``, taking a newer deferred read in first."""
    entry = scope.stamps.get(id(entity))
    for source in _deferred:
        newer = source.take(scope, entity, entry)
        if newer is not None:
            entry = scope.stamps[id(entity)] = newer
    return entry


def _stamp_in(scope: RequestScope, entity: Any) -> ReadStamp | None:
    """The stamp of ``entity`` in ``scope`` as a :class:`ReadStamp` (made once from the plain tuple;
    a statement's shared tuple gets the entity itself in its first field)."""
    entry = _entry(scope, entity)
    if entry is None or type(entry) is ReadStamp:
        return entry
    made = scope.stamps[id(entity)] = ReadStamp(entity, *entry[1:])
    return made


_FIELDS = {name: index for index, name in enumerate(ReadStamp._fields)}


def restamp(scope: RequestScope, entity: Any, **changes: Any) -> bool:
    """Change what the stamp of ``entity`` says (``for_update``, ``stale_lock``,
    ``site``, ``leases``) by replacing it; False when ``entity`` was not read."""
    me = id(entity)
    entry = _entry(scope, entity)
    if entry is None:
        return False
    values = list(entry)
    values[0] = entity  # a statement's shared tuple holds its rows there
    for name, value in changes.items():
        values[_FIELDS[name]] = value
    scope.stamps[me] = tuple(values)
    return True


@guarded
def record_stale_lock(entity: Any) -> None:
    """The row of ``entity`` was re-read FOR UPDATE but the object kept old values.

    (SQLAlchemy's identity map without ``populate_existing``.)  Writing it later
    stomps on whatever changed between the first read and the lock: TXN112.
    """
    scope = current_scope()
    if scope is not None:
        restamp(scope, entity, stale_lock=True)


def read_stamp(entity: Any) -> ReadStamp | None:
    """The stamp of ``entity`` in this request, if it was read (for integrations)."""
    scope = current_scope()
    return _stamp_in(scope, entity) if scope is not None else None


def forget(entity: Any) -> None:
    """Drop the stamp of ``entity`` (deleted, or a temporary the ORM threw away)."""
    scope = current_scope()
    if scope is not None:
        scope.stamps.pop(id(entity), None)
        for source in _deferred:
            source.drop(scope, entity)


# -- writes ---------------------------------------------------------------------------

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

    Written flat, like :func:`record_read`: it runs for every write.  A write that
    cannot be reported is only remembered (for TXN103); any other one is judged
    in full by :class:`_Write`.
    """
    if not settings.enabled:
        return
    scope, transactions, _ = current_state()
    if scope is None:
        return
    try:
        cls = model or type(entity)
        policy = write_policy(cls)
        if policy is None:
            return
        if key is None:
            key = getattr(entity, "pk", None) or getattr(entity, "id", None)
        if transaction is CURRENT:
            transaction = transactions[-1] if transactions else None
        if _deferred:
            _entry(scope, entity)  # a read an integration left on the object counts
        write(scope, entity, model=cls, policy=policy, key=key,
              written=frozenset(fields) if fields is not None else None, transaction=transaction,
              created=created, versioned=versioned, history_model=history_model, depth=2)
    except StompingError:
        raise
    except Exception:
        log.exception("txnsafety: internal error in %s (the request goes on)", "record_write")


def write_policy(cls: type) -> Policy | None:
    """The policy a write of ``cls`` is judged by: its own; ``STRICT_DEFAULT`` in
    strict mode when it has none; None when the write is not checked at all."""
    policy = cached_policy(cls, _MISSING)
    if policy is _MISSING:
        policy = policy_of(cls)
    if policy is None and settings.strict:
        return STRICT_DEFAULT
    return policy


def write(scope: RequestScope, entity: Any, *, model: type, policy: Policy, key: Any,
          written: frozenset[str] | None, transaction: Transaction | None, created: bool = False,
          versioned: bool = False, history_model: type | None = None, depth: int = 1, frame: Any = None,
          locate: Locate | None = None, sent: frozenset[str] | None | Any = _MISSING) -> None:
    """The step :func:`record_write` ends with, for an integration's per-write hook that
    has already found the scope, the class (``model``), its policy (``STRICT_DEFAULT``
    when it has none) and the ``transaction`` (SQLAlchemy's flush, Django's ``save()``).
    Every fact is named at the call (keyword-only): a call with bare ``True``/``None``
    in eleven positions cannot be read, and the keywords cost the hot path nothing
    it measures (``benchmarks/bench_checker.py``).

    ``created`` marks an insert; ``versioned`` a write the data layer makes
    conditional (it cannot stomp); ``history_model`` the table the row's write
    history is kept under when it is not ``model``'s (a proxy and its concrete model).

    The entity's read is looked up in ``scope.stamps`` only: an integration that
    leaves its reads on the objects (:class:`DeferredReads`) takes the read in first.

    ``depth`` counts the frames between the write's caller and this one (1: called
    by the code that writes); the full judgement looks for sites from there.  It
    raises what :func:`record_write` would (in ``raise`` mode a violation ends
    here, unremembered); the caller guards it.

    ``written`` is what the write sends *from the read*: an integration leaves out
    the columns the database computes or that are written blind (see
    :mod:`txnsafety.values`), and passes ``versioned=True`` when none is left.
    ``sent`` names every column the write sends, for the report (default:
    ``written``).  ``frame`` is where to look for the sites instead of ``depth``;
    ``locate(frame, entity)`` finds ``(write site, framework-internal)`` itself
    when a violation is reported: a framework's own write is not reported.
    """
    cls = model
    history_key = (history_model or cls, key)  # the row: its table's class and its key
    try:
        history = scope.writes.get(history_key)
    except TypeError:  # an unhashable key: by its text
        history_key = (history_key[0], repr(key))
        history = scope.writes.get(history_key)
    me = id(entity)
    if _cannot_stomp(policy, scope.stamps.get(me), transaction, created, versioned, written, history, me):
        site = user_site(depth) if (sites_wanted or settings.read_sites == "always") and wants_site(cls) else None
    else:
        site = _Write(entity, scope, cls, key, policy, _stamp_in(scope, entity), transaction, created,
                      history, frame if frame is not None else sys._getframe(depth), locate,
                      written if sent is _MISSING else sent).judge(written, versioned)
    # Keep the latest write of each object of a row, ``(tick, field ticks, site, entity)``, in
    # write order, so a later write scans only the writes made after its own read (see
    # _erased_write).  ``field ticks`` says when each field was last written by this object
    # (key None: the whole row), so a field written before another object's read does not
    # count as erased by that object because a later write of this one changed another
    # field.  ``site`` is what a later TXN103 names as "the other write"; the entity is held
    # so that its id, the key, names no other object while the request lasts.
    now = next(scope._clock)
    if history is None:
        history = scope.writes[history_key] = {}
        ticks: dict[str | None, int] = {}
    else:
        previous = history.pop(me, None)  # re-inserted last: the dict stays in write order
        ticks = {} if previous is None else previous[1]  # this object's own: updated in place
    if written is None:
        ticks[None] = now
    else:
        for name in written:
            ticks[name] = now
    history[me] = (now, ticks, site, entity)


def _cannot_stomp(policy: Policy, entry: tuple[Any, ...] | None, txn: Transaction | None, created: bool,
                  versioned: bool, written: frozenset[str] | None, history: dict[int, tuple[Any, ...]] | None,
                  me: int) -> bool:
    """True when :meth:`_Write.judge` would report nothing: the common, safe write.

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
            return False  # the transaction does not protect it (a lock might: see _Write)
    elif protection is not _NOTHING:
        return False  # a user lock: judged in full
    return not (policy.internal and history and _erased_write(history, me, read_tick, written) is not None)


def _erased_write(history: dict[int, tuple[Any, ...]], me: int, read_tick: int,
                  mine: frozenset[str] | None) -> tuple[Any, ...] | None:
    """The write of another object for the same row, made after this object was read,
    that this write erases (TXN103); None when there is none.

    ``history`` is in write order (see :func:`write`), so the scan starts at the
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


class _Write:
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

        Returns the site to remember the write by (see :func:`write`).
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
        other = _erased_write(history, id(self.entity), self.stamp.tick, mine)
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
