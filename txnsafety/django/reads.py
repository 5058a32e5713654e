"""Where the checker sees Django's reads: once per statement, not once per row.

Django builds model instances from rows in three places, all private iterables:
``ModelIterable`` (querysets; ``RelatedPopulator`` inside it for ``select_related``)
and ``RawModelIterable`` (``raw()``).  Every instance loaded through the ORM —
``get()``, iteration, related descriptors, ``prefetch_related``,
``refresh_from_db`` — comes out of one of them.

Querysets — ``QuerySet._fetch_all``
    Nearly every read is a queryset evaluated whole: the result cache is filled by
    one ``list()``.  The wrapper marks the statement's rows once that list is made:
    each row gets the values it was loaded with and the statement's one read (tick,
    transaction, leases, site: :class:`saves.LoadRead`) in its :data:`saves.LOADED`
    mark, by a C loop over the list; the checker takes the read when it asks about
    a row (:class:`LoadedReads`, a deferred-reads source).  No
    Python code of ours runs per row: a 200-row list costs what one ``get()``
    costs, plus the loops.  (Wrapping ``Model.from_db`` instead, as txnsafety did
    before, cost a Python call and a stamp per row: +18 to +28 % on such a list.)

Everything else — ``ModelIterable.__iter__``, ``RawModelIterable.__iter__``
    ``iterator()`` / ``aiterator()`` (rows streamed, never cached), ``raw()`` and
    ``select_for_update(of=...)`` or with ``select_related`` (the rows of tables
    joined in are locked too) go through a generator that
    stamps each row as it is yielded: a rarer path, with a per-row cost.
    ``select_related`` objects are stamped as Django sets them on their row
    (``RelatedPopulator``'s ``local_setter``, wrapped per statement).

``refresh_from_db``
    Loads through a temporary instance (a queryset ``get()``).  The wrapper keeps
    that temporary out of the request's history (no TXN103 double count) and
    re-stamps the refreshed object itself.  A partial refresh (``fields=``, which
    is also how deferred fields load) keeps the older stamp: the other fields are
    as old as the first read.

Private Django names used here are pinned by ``tests/django/test_private_api.py``.
"""
from __future__ import annotations

import functools
import logging
import sys
from collections import deque
from contextvars import ContextVar
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter
from typing import Any, Iterator

from django.db.models import Model
from django.db.models.query import ModelIterable, QuerySet, RawModelIterable, RelatedPopulator

from .. import check_then_act
from ..checker import add_deferred_reads, model_name, read_stamp, record_read, remove_deferred_reads, restamp, stamp
from ..codes import Code
from ..config import settings
from ..context import current_scope, current_state
from ..policies import cached_policy, policy_of
from ..report import StompingError, Violation, report
from ..sites import sites_wanted, user_site, wants_site
from . import saves, transactions as txns

log = logging.getLogger("txnsafety")

_LOADED = saves.LOADED
_LoadRead = saves.LoadRead
#: Runs an iterator to its end in C (the per-row loops below call only builtins).
_consume = deque(maxlen=0).extend

_originals: dict[str, Any] = {}


def checked(model: type) -> bool:
    """Whether reads of ``model`` are stamped (it has a policy, or the checker is strict)."""
    return policy_of(model) is not None or settings.strict


def _report_for_update_outside(model: type) -> None:
    scope = current_scope()
    report(Violation(
        Code.TXN108, "select_for_update() evaluated outside any transaction: the row lock ends with the "
        "statement (Django raises TransactionManagementError here on databases that support FOR UPDATE; on "
        "SQLite or inside TestCase it silently protects nothing)", model_name(model), None,
        read_site=user_site(2), request_id=scope.id if scope is not None else ""))


def _site(model: type, skip: int) -> Any:
    return user_site(skip + 1) if (sites_wanted or settings.read_sites == "always") and wants_site(model) else None


# -- refresh_from_db's temporaries ---------------------------------------------------------

@dataclass
class _Refresh:
    """What a ``refresh_from_db`` in progress loaded: its temporaries, and whether FOR UPDATE."""

    temps: list[Any] = field(default_factory=list)
    for_update: bool = False


_refreshing: ContextVar[_Refresh | None] = ContextVar("txnsafety_django_refresh", default=None)


def _mark_loaded(obj: Any, token: Any) -> None:
    """Keep the values ``obj`` was loaded with on it (see :data:`saves.LOADED`)."""
    values = obj.__dict__
    values[_LOADED] = (token, values.copy())


# -- querysets evaluated whole: one stamp per statement --------------------------------------

def _fetch_all(self: QuerySet) -> None:
    """``QuerySet._fetch_all``: fill the result cache, then stamp its rows at once.

    Where the checker sees no request (it is off, the code runs outside a request, or the
    sample left the request out) the cache is filled the same way, through the original
    ``ModelIterable.__iter__``: Django's ``_fetch_all`` would pass every statement through
    :func:`_model_iter` only for it to find nothing to do (a left-out request paid about
    a fifth of a checked one's extra instructions, mostly there).

    ``select_for_update()`` too (five of the benchmark request's twenty reads), unless it
    names ``of=`` or joins tables in (``select_related``): those lock rows of several
    models, stamped row by row (:func:`_model_iter`).
    """
    original = _original_fetch_all
    if self._result_cache is not None or self._iterable_class is not ModelIterable:
        return original(self)  # cached, values()
    scope, _, leases = current_state() if settings.enabled else _OFF
    if scope is None:  # off, no request, or one the sample leaves out: Django's own body, below
        self._result_cache = list(_original_model_iter(ModelIterable(self)))
        if self._prefetch_related_lookups and not self._prefetch_done:
            self._prefetch_related_objects()
        return None
    query = self.query
    for_update = query.select_for_update
    if for_update and (query.select_for_update_of or query.select_related):
        return original(self)  # per row, see _model_iter
    if for_update:
        try:
            _locking(scope, self)
        except StompingError:
            raise
        except Exception:
            log.exception("txnsafety: internal error while stamping a Django read")
    # Django's own _fetch_all, with the original ModelIterable.__iter__ (pinned by
    # test_private_api.py): no pass through _model_iter, no flag on the queryset telling it
    # that the list is stamped here.
    self._result_cache = rows = list(_original_model_iter(ModelIterable(self)))
    if rows:
        try:
            _stamp_rows(scope, leases, self, rows, for_update)
        except StompingError:
            raise
        except Exception:  # the checker must never break a query
            log.exception("txnsafety: internal error while stamping a Django read")
    if self._prefetch_related_lookups and not self._prefetch_done:
        self._prefetch_related_objects()
    return None


def _locking(scope: Any, queryset: QuerySet) -> None:
    """Before a ``select_for_update()`` runs: TXN108 when no transaction holds its locks
    (on PostgreSQL/MySQL/Oracle Django then raises TransactionManagementError itself; on
    SQLite, which has no FOR UPDATE, and inside TestCase's own atomic block it would go
    on), else the row lock serializes the checks made after it (TXN105)."""
    txn = txns.transaction_for(queryset.db)
    if txn is None:
        _report_for_update_outside(queryset.model)
    else:
        check_then_act.note_row_lock(scope, txn)


_original_fetch_all = QuerySet._fetch_all
#: ``current_state()``'s answer when the checker is off: no scope, no transactions, no leases.
_OFF: tuple[Any, ...] = (None, (), ())


def _stamp_rows(scope: Any, leases: tuple[Any, ...], queryset: QuerySet, rows: list[Any],
                for_update: bool = False) -> None:
    """One statement's rows, read now (``for_update``: locked by it): mark each with its loaded values and
    the statement's read (:class:`saves.LoadRead`, taken by :class:`LoadedReads` when the
    checker asks), or hand them to the ``refresh_from_db`` in progress.

    Nothing goes into the request's ``stamps`` here: a dict entry per row cost a 200-row
    list about 3 points, and most rows are never written.  Consecutive statements share
    one read (``RequestScope.shared_read``) when nothing has ticked between them (no write,
    lock or other read: ``RequestScope.last``) and they ran in the same transaction under
    the same leases, with no read site: nothing the checker orders reads against can tell
    them apart.  Written flat for ``get()``
    (the cached getter of the loaded fields, the site test inline), since every Python
    call here costs a one-row read about a tenth of a point.
    """
    first = rows[0]
    model = type(first)
    policy = cached_policy(model, _MISSING)
    if policy is _MISSING:
        policy = policy_of(model)
    if policy is None and not settings.strict:
        return
    deferred, defer = queryset.query.deferred_loading  # private; pinned by test_private_api.py
    known = _getters.get(model) if defer and not deferred else None  # nothing deferred: the usual query
    names, values_of = known if known is not None else _loaded_fields(model, queryset.query, first)
    holder = _refreshing.get()
    if holder is None:  # the statement's read, carried by each row's mark (see saves.LoadRead)
        # the database the rows came from, as from_db set it (queryset.db would ask the router again)
        txn = txns.transaction_for(first._state.db)
        site = user_site(3) if (sites_wanted or settings.read_sites == "always") and wants_site(model) else None
        token: Any = scope.shared_read  # the previous statement's read, if nothing ticked since
        if (token is None or token[1] != scope.last or token[2] is not txn or token[3] is not leases
                or site is not None or token[5] != for_update):
            now = scope.last = next(scope._clock)
            token = scope.shared_read = _LoadRead((scope.token, now, txn, leases, site, for_update))
    else:  # a refresh_from_db's temporaries: their values are merged, their read is the refresh's
        token = scope.token
        if for_update:
            holder.for_update = True
    if len(rows) == 1:  # get(), first(), a related descriptor: the common statement
        setattr(first, _LOADED, (token, names, values_of(first)))
    else:  # for each row: setattr(row, LOADED, (read, names, its values)), all in C
        _consume(map(setattr, rows, repeat(_LOADED), zip(repeat(token), repeat(names), map(values_of, rows))))
    if holder is not None:
        holder.temps.extend(rows)


class LoadedReads:
    """The reads the rows of querysets evaluated whole carry in their ``LOADED`` marks,
    for the checker (a :class:`txnsafety.checker.DeferredReads` source): taken into the
    request's stamps when the checker asks about a row (a write, ``read_stamp``)."""

    def take(self, scope: Any, entity: Any, entry: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
        mark = getattr(entity, _LOADED, None)  # never entity.__dict__: see _loaded_fields
        if type(mark) is not tuple or not mark:
            return None
        read = mark[0]
        if type(read) is not _LoadRead or read[0] is not scope.token or (entry is not None and entry[1] >= read[1]):
            return None
        return (entity, read[1], read[2], read[3], read[4], read[5], False)

    def drop(self, scope: Any, entity: Any) -> None:
        """Forgotten (deleted, or a temporary): the row keeps its loaded values, not the read."""
        mark = getattr(entity, _LOADED, None)
        if type(mark) is tuple and mark and type(mark[0]) is _LoadRead and mark[0][0] is scope.token:
            setattr(entity, _LOADED, (scope.token, *mark[1:]))


loaded_reads = LoadedReads()


def _loaded_fields(model: type, query: Any, first: Any) -> tuple[tuple[str, ...], Any]:
    """The attnames a statement loaded (its rows all have the same) and a C getter of their values.

    Primary keys are left out: Django never writes one through ``update_fields`` or
    ``bulk_update()`` (both raise ValueError), the only writes whose loaded values are
    looked at (:func:`saves.from_read`); each name left out is one ``getattr`` less per row.
    Never ``obj.__dict__`` per row: on CPython 3.11+ an instance keeps its attributes
    inline until ``__dict__`` is asked for, and making the dict costs more than the rest
    of the row's stamp, then slows every later attribute access of the row.
    """
    names, defer = query.deferred_loading  # private; pinned by test_private_api.py
    if defer and not names:  # nothing deferred (the usual query): every concrete field
        known = _getters.get(model)
        if known is not None:
            return known
        deferred: Any = ()
    else:  # defer() / only(): ask the first row (Django's public call; makes its __dict__)
        deferred = first.get_deferred_fields()
    key = (model, frozenset(deferred)) if deferred else model
    known = _getters.get(key)
    if known is None:
        names = tuple(f.attname for f in model._meta.concrete_fields
                      if f.attname not in deferred and not f.primary_key)
        got = names or (model._meta.pk.attname,)  # (a model of keys alone: its values count for nothing)
        # attrgetter of one name returns the bare value, not a tuple: that name twice
        known = _getters[key] = (names, attrgetter(*got, *got) if len(got) == 1 else attrgetter(*got))
    return known


_getters: dict[Any, tuple[tuple[str, ...], Any]] = {}


# -- rows one by one: iterator(), raw(), select_for_update() ----------------------------------

def _model_iter(self: ModelIterable) -> Iterator[Any]:
    rows = _original_model_iter(self)
    if not settings.enabled:
        return rows
    queryset = self.queryset
    scope, _, leases = current_state()
    if scope is None:
        return rows
    return _each_row(queryset, rows, scope, leases, bool(queryset.query.select_for_update))


_original_model_iter = ModelIterable.__iter__


def _raw_iter(self: RawModelIterable) -> Iterator[Any]:
    rows = _original_raw_iter(self)
    if not settings.enabled:
        return rows
    scope, _, leases = current_state()
    if scope is None:
        return rows
    return _each_row(self.queryset, rows, scope, leases, False)


_original_raw_iter = RawModelIterable.__iter__


def _each_row(queryset: Any, rows: Iterator[Any], scope: Any, leases: tuple[Any, ...],
              for_update: bool) -> Iterator[Any]:
    """Stamp each row as it is yielded (the rows of a stream, a raw query, a FOR UPDATE)."""
    model = queryset.model
    db = queryset.db
    txn = txns.transaction_for(db)
    locks_self, joined, of = False, None, ()
    if for_update:
        # Reported before Django runs the query: on PostgreSQL/MySQL/Oracle Django then
        # raises TransactionManagementError itself; on SQLite (no FOR UPDATE) and inside
        # TestCase's own atomic block it would silently go on.
        if txn is None:
            _report_for_update_outside(model)
        else:
            query = queryset.query
            of = tuple(query.select_for_update_of or ())
            locks_self = not of or "self" in of
            # FOR UPDATE locks the rows of every table joined in (select_related) unless OF
            # limits it (PostgreSQL, MySQL, Oracle; SQLite has no FOR UPDATE).
            joined = query.select_related if query.select_related and _locks_joins(db) else None
            check_then_act.note_row_lock(scope, txn)  # a check after it is serialized (TXN105)
    is_checked = checked(model)
    holder = _refreshing.get()
    token = scope.token
    site: Any = _MISSING
    loaded: Any = None  # the loaded fields' names and getter, from the first row (all rows have the same)
    for obj in rows:
        if is_checked:
            try:
                if loaded is None:
                    loaded = (_loaded_fields(model, queryset.query, obj)
                              if type(obj) is model and isinstance(queryset, QuerySet) else (None, None))
                if loaded[1] is not None:  # never obj.__dict__: see _loaded_fields
                    setattr(obj, _LOADED, (token, loaded[0], loaded[1](obj)))
                else:
                    _mark_loaded(obj, token)
                if holder is not None:
                    holder.temps.append(obj)
                    if locks_self:
                        holder.for_update = True
                else:
                    if site is _MISSING:
                        site = _site(model, 1)
                    stamp(scope, obj, txn, leases, locks_self, site)
            except StompingError:
                raise
            except Exception:
                log.exception("txnsafety: internal error while stamping a Django read")
        if joined:
            _lock_joined(scope, obj, joined, of, "")
        yield obj


_MISSING: Any = object()


def _locks_joins(alias: str) -> bool:
    conn = txns._connection(alias)
    return bool(conn.features.has_select_for_update) and conn.vendor != "sqlite"


def _lock_joined(scope: Any, obj: Any, related: Any, of: tuple[str, ...], prefix: str) -> None:
    """Mark the ``select_related`` objects of ``obj`` read FOR UPDATE (those OF names, if given).

    ``related`` is ``Query.select_related``: True (every non-null foreign key, followed
    down) or ``{field name: {nested...}}``; the objects are in ``_state.fields_cache``.
    """
    cache = getattr(obj._state, "fields_cache", None) or {}
    items = related.items() if isinstance(related, dict) else [(name, True) for name in list(cache)]
    for name, nested in items:
        rel = cache.get(name)
        if rel is None or not isinstance(rel, Model):
            continue
        path = prefix + name
        if not of or path in of:
            restamp(scope, rel, for_update=True)
        if nested:
            _lock_joined(scope, rel, nested, of, path + "__")


# -- select_related: the objects Django sets on each row ------------------------------------------

class _StampingSetter:
    """A ``RelatedPopulator``'s ``local_setter`` that stamps the related object it sets."""

    __slots__ = ("setter", "db", "model")

    def __init__(self, setter: Any, db: str, model: type) -> None:
        self.setter, self.db, self.model = setter, db, model

    def __call__(self, from_obj: Any, obj: Any) -> None:
        self.setter(from_obj, obj)
        if obj is None or not settings.enabled:
            return
        scope, _, leases = current_state()
        if scope is None:
            return
        try:
            _mark_loaded(obj, scope.token)
            holder = _refreshing.get()
            if holder is not None:
                holder.temps.append(obj)
                return
            stamp(scope, obj, txns.transaction_for(self.db), leases, False, _site(self.model, 2))
        except StompingError:
            raise
        except Exception:
            log.exception("txnsafety: internal error while stamping a Django read")


def _populator_init(self: RelatedPopulator, klass_info: Any, select: Any, db: str) -> None:
    _original_populator_init(self, klass_info, select, db)
    if settings.enabled and current_state()[0] is not None and checked(self.model_cls):
        self.local_setter = _StampingSetter(self.local_setter, db, self.model_cls)


_original_populator_init = RelatedPopulator.__init__


# -- refresh_from_db -------------------------------------------------------------------------

def _refresh_from_db(self: Model, *args: Any, **kwargs: Any) -> Any:
    original = _originals["Model.refresh_from_db"]
    if not settings.enabled or current_scope() is None:
        return original(self, *args, **kwargs)
    fields = kwargs.get("fields", args[1] if len(args) > 1 else None)
    holder = _Refresh()
    token = _refreshing.set(holder)
    try:
        result = original(self, *args, **kwargs)
    finally:
        _refreshing.reset(token)
    scope = current_scope()
    if scope is not None:
        for temp in holder.temps:
            saves.merge_refresh(self, temp, scope.token)
    if checked(type(self)) and (fields is None or read_stamp(self) is None):
        record_read(self, transaction=txns.transaction_for(self._state.db), for_update=holder.for_update,
                    site=saves.refresh_site(self, sys._getframe(1)))
    return result


# -- install ---------------------------------------------------------------------------------

_PATCHES: tuple[tuple[Any, str, Any], ...] = (
    (QuerySet, "_fetch_all", _fetch_all),
    (ModelIterable, "__iter__", _model_iter),
    (RawModelIterable, "__iter__", _raw_iter),
    (RelatedPopulator, "__init__", _populator_init),
    (Model, "refresh_from_db", _refresh_from_db),
)


def install() -> None:
    """Put the read hooks in place (called by :func:`txnsafety.django.hooks.install`, under its lock)."""
    add_deferred_reads(loaded_reads)
    for owner, name, hook in _PATCHES:
        key = f"{owner.__name__}.{name}"
        _originals[key] = owner.__dict__[name]
        if name == "refresh_from_db":
            functools.update_wrapper(hook, _originals[key])
        setattr(owner, name, hook)


def uninstall() -> None:
    remove_deferred_reads(loaded_reads)
    for owner, name, _ in _PATCHES:
        setattr(owner, name, _originals[f"{owner.__name__}.{name}"])
