"""Read stamps: what was true when an entity was read, kept for the request.

A read of an entity whose model has a policy records a stamp: a per-request tick
(the nonce), the transaction in force, the leases held, whether the row was read
``FOR UPDATE``, and the user's read site.  Reads run for every row of every
request, so their common case is written flat and allocates only plain tuples
shaped like :class:`ReadStamp` (the rows of one statement share one,
:func:`stamp_statement`); integrations that keep their reads on the objects
themselves register a :class:`DeferredReads` source, asked when a read is needed.
The writes that judge these stamps are :mod:`txnsafety.checker`'s.
"""
from __future__ import annotations

import logging
from typing import Any, NamedTuple, Protocol, Sequence

from .codes import Code
from .config import settings
from .context import LeaseLike, RequestScope, Transaction, current_scope, current_state
from .policies import cached_policy, policy_of
from .report import StompingError, Violation, model_name, report
from .sites import Site, sites_wanted, user_site, wants_site

log = logging.getLogger("txnsafety")

#: Sentinel: "use the transaction of the current context".
CURRENT: Any = object()
_MISSING: Any = object()


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
        now = scope.last = next(scope._clock)
        scope.stamps[id(entity)] = (entity, now, transaction, leases, site, for_update, False)
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
    now = scope.last = next(scope._clock)
    scope.stamps[id(entity)] = (entity, now, transaction, leases, site, for_update, False)


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
        now = scope.last = next(scope._clock)
        scope.stamps[id(entity)] = (entity, now, transaction, leases, site, for_update, False)
        return
    rows = tuple(entities)
    now = scope.last = next(scope._clock)
    read = (rows, now, transaction, leases, site, for_update, False)
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


def entry_of(scope: RequestScope, entity: Any) -> tuple[Any, ...] | None:
    """The stamp tuple of ``entity`` in ``scope``, taking a newer deferred read in first."""
    entry = scope.stamps.get(id(entity))
    for source in _deferred:
        newer = source.take(scope, entity, entry)
        if newer is not None:
            entry = scope.stamps[id(entity)] = newer
    return entry


def stamp_in(scope: RequestScope, entity: Any) -> ReadStamp | None:
    """The stamp of ``entity`` in ``scope`` as a :class:`ReadStamp` (made once from the plain tuple;
    a statement's shared tuple gets the entity itself in its first field)."""
    entry = entry_of(scope, entity)
    if entry is None or type(entry) is ReadStamp:
        return entry
    made = scope.stamps[id(entity)] = ReadStamp(entity, *entry[1:])
    return made


_FIELDS = {name: index for index, name in enumerate(ReadStamp._fields)}


def restamp(scope: RequestScope, entity: Any, **changes: Any) -> bool:
    """Change what the stamp of ``entity`` says (``for_update``, ``stale_lock``,
    ``site``, ``leases``) by replacing it; False when ``entity`` was not read."""
    me = id(entity)
    entry = entry_of(scope, entity)
    if entry is None:
        return False
    values = list(entry)
    values[0] = entity  # a statement's shared tuple holds its rows there
    for name, value in changes.items():
        values[_FIELDS[name]] = value
    scope.stamps[me] = tuple(values)
    scope.last = -1  # the next statement's read is newer than this stamp: it shares no earlier tick
    return True


def record_stale_lock(entity: Any) -> None:
    """The row of ``entity`` was re-read FOR UPDATE but the object kept old values.

    (SQLAlchemy's identity map without ``populate_existing``.)  Writing it later
    stomps on whatever changed between the first read and the lock: TXN112.
    """
    try:
        scope = current_scope()
        if scope is not None:
            restamp(scope, entity, stale_lock=True)
    except StompingError:
        raise
    except Exception:
        log.exception("txnsafety: internal error in record_stale_lock (the request goes on)")


def read_stamp(entity: Any) -> ReadStamp | None:
    """The stamp of ``entity`` in this request, if it was read (for integrations)."""
    scope = current_scope()
    return stamp_in(scope, entity) if scope is not None else None


def forget(entity: Any) -> None:
    """Drop the stamp of ``entity`` (deleted, or a temporary the ORM threw away)."""
    scope = current_scope()
    if scope is not None:
        scope.stamps.pop(id(entity), None)
        for source in _deferred:
            source.drop(scope, entity)
