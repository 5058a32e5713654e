"""Where the checker hooks into Django's ORM.  Installed once by the app's ``ready()``.

Reads — ``Model.from_db``
    Django's documented "customizing model loading" point.  Every instance the ORM
    builds from a row goes through it: querysets, ``get()``, iteration,
    ``select_related`` (the related populators call ``from_db`` too),
    ``prefetch_related``, ``raw()``.  ``post_init`` cannot be used: it fires before
    ``_state.adding`` / ``_state.db`` are set, so it cannot tell a load from a new
    object.  The wrapper costs one function call and two checks per instance
    when the checker is idle; models that override ``from_db`` without calling
    ``super()`` (the Django docs' own example does that) are wrapped too.

``SELECT ... FOR UPDATE`` — ``ModelIterable.__iter__``
    An instance does not remember the query that loaded it, so the tag is put on
    where the queryset is evaluated.  The wrapper looks at
    ``queryset.query.select_for_update`` once per query and, when it is false
    (nearly always), hands back Django's own generator untouched: no per-row cost.

``refresh_from_db``
    Loads through a temporary instance (via ``from_db``).  The wrapper keeps that
    temporary out of the request's history (no TXN103 double count) and re-stamps
    the refreshed object itself.  A partial refresh (``fields=``, which is also
    how deferred fields load) keeps the older stamp: the other fields are as old
    as the first read.

Writes — ``Model.save_base``
    What ``save()``, ``asave()`` and ``create()`` call; not the ``pre_save`` signal,
    which an application may send by hand for a write that is no ``save()``.  It
    runs before ``save_base`` opens its own atomic block for multi-table
    inheritance, so the transaction seen is the caller's; ``raw`` (fixture loading)
    is ignored.  ``save()`` without ``update_fields`` is a whole-row write; what a
    partial one writes from the read, and whose call it is, see :mod:`.saves`.

``QuerySet.bulk_update``
    Sends no signal: the public method is wrapped; each object is judged as a
    write of the listed fields, in the caller's transaction (checked before
    Django opens its own atomic block).  ``QuerySet.update()`` is not hooked: it
    writes in one statement, and with ``F()`` it is atomic in the database.

Transactions — ``Atomic.__enter__``
    See :mod:`txnsafety.django.transactions`.
"""
from __future__ import annotations

import functools
import logging
import sys
import threading
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from django.db import DEFAULT_DB_ALIAS, router, transaction as dj_transaction
from django.db.models import Model
from django.db.models.query import ModelIterable, QuerySet

from .. import check_then_act, context, policies, versioned_writes
from ..checker import guarded, model_name, read_stamp, record_read, restamp, stamp, write, write_policy
from ..codes import Code
from ..config import settings
from ..context import current_scope
from ..policies import Policy, policy_of
from ..report import StompingError, Violation, report
from ..sites import sites_wanted, user_site, user_trace, wants_site
from . import lookups, saves, transactions as txns
from .transactions import transaction_for

log = logging.getLogger("txnsafety")

#: Bound once (see txnsafety.checker): the per-row and per-write look-ups.
_get_state = context._state.get     # (scope, transactions, leases) of this context
_cached_policy = policies._cache.get  # model -> Policy | None, once policy_of() has seen it

_installed = False
_install_lock = threading.Lock()
_originals: dict[str, Any] = {}
_wrapped_from_db: dict[type, Any] = {}


# -- helpers -------------------------------------------------------------------------

def _checked(model: type) -> bool:
    return policy_of(model) is not None or settings.strict


def history_model(model: type) -> type:
    """The class whose name keys the per-row write history (TXN103).

    A proxy and its concrete model are the same table, so both share the concrete
    model's history: two objects for one row loaded through different proxies are
    caught, whichever policy each class declares.
    """
    return model._meta.concrete_model or model


def row_key(pk: Any, using: str | None) -> Any:
    """The key of a row: its primary key, prefixed with the alias off the default database."""
    if using is None or using == DEFAULT_DB_ALIAS:
        return pk
    return f"{using}:{pk}"


def _report(code: Code, message: str, model: type, key: Any, *, read_site: Any = None,
            write_site: Any = None, trace: bool = False) -> None:
    scope = current_scope()
    report(Violation(code, message, model_name(model), None if key is None else str(key),
                     read_site=read_site, write_site=write_site,
                     trace=user_trace(2) if trace else "",
                     request_id=scope.id if scope is not None else ""))


# -- reads ---------------------------------------------------------------------------

@dataclass
class _Refresh:
    temps: list[Any] = field(default_factory=list)
    for_update: bool = False


_refreshing: ContextVar[_Refresh | None] = ContextVar("txnsafety_django_refresh", default=None)


def _wrap_from_db(original: Any) -> classmethod:
    func = original.__func__

    @functools.wraps(func)
    def from_db(cls: type, db: str, field_names: Any, values: Any) -> Any:
        obj = func(cls, db, field_names, values)
        # The hot path: one attribute and one context-variable read when idle.
        if settings.enabled:
            scope, _, leases = _get_state()
            if scope is not None:
                try:
                    _stamp_loaded(scope, leases, cls, db, obj, field_names, values)
                except StompingError:
                    raise
                except Exception:  # the checker must never break a query
                    log.exception("txnsafety: internal error while stamping a Django read")
        return obj

    from_db.__txnsafety_wrapped__ = func  # type: ignore[attr-defined]
    return classmethod(from_db)


def _stamp_loaded(scope: Any, leases: tuple[Any, ...], cls: type, db: str, obj: Any, field_names: Any,
                  values: Any) -> None:
    """Stamp an instance ``from_db`` just built (what ``record_read`` would do, with the
    transaction of its database: a plain read, so never TXN108), unless it is the
    temporary of a ``refresh_from_db``, and keep the values loaded on it (see
    :data:`saves.LOADED`: what a blind write is told from, and the mark of a copy
    read in an earlier request).  Runs for every row: written flat."""
    holder = _refreshing.get()
    policy = _cached_policy(cls, _MISSING)
    if policy is _MISSING:
        policy = policy_of(cls)
    if policy is None and not settings.strict:
        return
    obj.__dict__[_LOADED] = (scope.token, field_names, values)
    if holder is not None:
        holder.temps.append(obj)
        return
    site = user_site(2) if (sites_wanted or settings.read_sites == "always") and wants_site(cls) else None
    stamp(scope, obj, transaction_for(db), leases, False, site)


_MISSING: Any = object()
_LOADED = saves.LOADED


def wrap_model_from_db(model: type) -> None:
    """Wrap ``model.from_db`` if the class overrides it (called for every model at ready)."""
    own = model.__dict__.get("from_db")
    if own is None or model in _wrapped_from_db or not isinstance(own, classmethod):
        return
    if getattr(own.__func__, "__txnsafety_wrapped__", None) is not None:
        return
    _wrapped_from_db[model] = own
    model.from_db = _wrap_from_db(own)  # type: ignore[attr-defined]


def _model_iter(self: ModelIterable) -> Iterator[Any]:
    if not self.queryset.query.select_for_update or not settings.enabled or current_scope() is None:
        return _original_model_iter(self)
    return _for_update_rows(self, _original_model_iter(self))


_original_model_iter = ModelIterable.__iter__


def _for_update_rows(iterable: ModelIterable, rows: Iterator[Any]) -> Iterator[Any]:
    queryset = iterable.queryset
    txn = txns.transaction_for(queryset.db)
    if txn is None:
        # Reported before Django runs the query: on PostgreSQL/MySQL/Oracle Django
        # then raises TransactionManagementError itself; on SQLite (no FOR UPDATE)
        # and inside TestCase's own atomic block it would silently go on.
        _report(Code.TXN108, "select_for_update() evaluated outside any transaction: the row lock ends "
                "with the statement (Django raises TransactionManagementError here on databases that "
                "support FOR UPDATE; on SQLite or inside TestCase it silently protects nothing)",
                queryset.model, None, read_site=user_site(1))
    scope = current_scope()
    holder = _refreshing.get()
    query = queryset.query
    of = tuple(query.select_for_update_of or ())
    locks_self = not of or "self" in of
    # FOR UPDATE locks the rows of every table joined in (select_related) unless OF limits it
    # (PostgreSQL, MySQL, Oracle; SQLite has no FOR UPDATE, its transactions serialize anyway).
    joined = query.select_related if txn is not None and query.select_related and _locks_joins(queryset.db) \
        else False
    if txn is not None and scope is not None:
        check_then_act.note_row_lock(scope, txn)  # a check after it is serialized (TXN105)
    for obj in rows:
        if txn is not None and scope is not None:
            if not locks_self:
                pass
            elif not restamp(scope, obj, for_update=True) and holder is not None and any(
                    t is obj for t in holder.temps):
                holder.for_update = True
            if joined:
                _lock_joined(scope, obj, joined, of, "")
        yield obj


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
    cls = type(self)
    scope = current_scope()
    if scope is not None:
        for temp in holder.temps:
            saves.merge_refresh(self, temp, scope.token)
    if _checked(cls) and (fields is None or read_stamp(self) is None):
        record_read(self, transaction=txns.transaction_for(self._state.db), for_update=holder.for_update)
    return result


# -- writes --------------------------------------------------------------------------

def _field_names(model: type, fields: Iterable[Any] | None) -> frozenset[str] | None:
    if fields is None:
        return None
    meta = model._meta
    names = set()
    for name in fields:
        name = getattr(name, "name", name)  # bulk_update also accepts Field objects in some versions
        try:
            names.add(meta.get_field(name).name)
        except Exception:
            names.add(str(name))
    return frozenset(names)


def judge_write(instance: Any, using: str | None, fields: Iterable[Any] | None, *,
                created: bool | None = None, versioned: bool = False, frame: Any = None) -> None:
    """Judge a write of ``instance`` on database ``using`` (``fields`` None: whole row).

    The facts go to the checker (:func:`txnsafety.checker.write`), which judges:
    the columns written from the read (:func:`saves.from_read`; none left: the
    write cannot stomp), the read of a copy loaded in an earlier request, and the
    integration's own site finder (:func:`saves.locate`).  ``frame`` is the frame
    the write's caller is looked for from (default: the caller of this function).

    Guarded like :func:`txnsafety.checker.guarded`, written out: it runs for every
    ``save()``, and the decorator's wrapper is one more call each time.
    """
    if not settings.enabled:
        return
    scope, _, _ = _get_state()
    if scope is None:
        return
    try:
        cls = type(instance)
        policy = write_policy(cls)
        if policy is None:
            return
        using = using or instance._state.db or DEFAULT_DB_ALIAS
        if created is None:
            created = bool(instance._state.adding)
        txn = txns.transaction_for(using)
        key = row_key(instance.pk, using)
        sent = _field_names(cls, fields)
        written = sent
        if created and scope.lookups:  # an insert after a check of this request? (TXN105)
            lookups.inserted(scope, instance, cls, using, key, frame if frame is not None else sys._getframe(1))
        if not created:
            if id(instance) not in scope.stamps:
                _earlier_read(scope, instance)
            if not versioned and sent is not None:
                written = saves.from_read(instance, cls, sent)
                versioned = not written  # nothing from the read: this write cannot stomp
        if policy.versioned_field and not versioned and not created:
            _check_unversioned_write(instance, policy, key, txn)
        # record_write's last step, without its look-ups again (scope, policy, transaction)
        write(scope, instance, cls, policy, key, written if written else sent, created, txn, versioned,
              history_model(cls), 1, frame=frame if frame is not None else sys._getframe(1),
              locate=saves.locate, sent=sent)
    except StompingError:
        raise
    except Exception:
        log.exception("txnsafety: internal error in %s (the request goes on)", "judge_write")


def _earlier_read(scope: Any, instance: Any) -> None:
    """``instance`` is written in this request, which never read it, but it was loaded
    from the database under a checker scope: in an earlier request (a copy kept in a
    cache, pickled or not, or in a module global).  For this request that read
    happened outside any of its transactions or locks (TXN101 / TXN102)."""
    token = saves.loaded_token(instance)
    if token is None or token is scope.token:
        return  # never loaded under a scope (created, or unknown provenance), or forgotten here
    record_read(instance, transaction=None, site=None)


def _check_unversioned_write(instance: Any, policy: Policy, key: Any, txn: Any) -> None:
    """A ``@versioned`` model written by a plain ``save()``: the facts for :mod:`..versioned_writes`
    (django-concurrency's version fields make ``save()`` itself conditional)."""
    name = policy.versioned_field or "version"
    field_obj = _version_field(type(instance), name)
    conditional = field_obj is not None and type(field_obj).__module__.split(".")[0] == "concurrency"
    versioned_writes.judge(instance, versioned_writes.UnversionedWrite(
        type(instance), key, name, txn, conditional,
        remedy="txnsafety.django.versioned_save() (or a filtered update on the version column)"))


def _version_field(model: type, name: str) -> Any:
    try:
        return model._meta.get_field(name)
    except Exception:
        return None


def _save_base(self: Model, raw: bool = False, force_insert: Any = False, force_update: bool = False,
               using: str | None = None, update_fields: Any = None) -> Any:
    """``Model.save_base``: judge the write (not ``raw`` fixture loading, nor Django's
    auto-created many-to-many rows, which send no ``pre_save`` either)."""
    if not raw and settings.enabled and _get_state()[0] is not None and not self._meta.auto_created:
        # ``using``: save() has asked the router already (a direct call: the instance's database)
        judge_write(self, using, update_fields, frame=sys._getframe(1))
    return _originals["Model.save_base"](self, raw=raw, force_insert=force_insert, force_update=force_update,
                                         using=using, update_fields=update_fields)


_save_base.alters_data = True  # type: ignore[attr-defined]


def _bulk_update(self: QuerySet, objs: Any, fields: Any, batch_size: Any = None) -> Any:
    original = _originals["QuerySet.bulk_update"]
    if settings.enabled and current_scope() is not None and _checked(self.model):
        objs = tuple(objs)
        using = self._db or router.db_for_write(self.model)
        for obj in objs:
            judge_write(obj, using, fields, created=False)
    return original(self, objs, fields, batch_size=batch_size)


_bulk_update.alters_data = True  # type: ignore[attr-defined]


# -- transactions ------------------------------------------------------------------------

def _atomic_enter(self: Any) -> None:
    _originals["Atomic.__enter__"](self)
    if not self._from_testcase:
        _note_root(self)


@guarded
def _note_root(self: Any) -> None:
    conn = dj_transaction.get_connection(self.using)
    blocks = conn.atomic_blocks
    last = len(blocks) - 1
    for index, block in enumerate(blocks):
        if not block._from_testcase:
            if index == last:  # self is the first non-TestCase block: a new root transaction
                txns.new_root_began(conn)
            return


# -- install -------------------------------------------------------------------------------

def install() -> None:
    """Install the hooks (idempotent).  The app's ``ready()`` calls it."""
    global _installed
    with _install_lock:
        if _installed:
            return
        _originals["Model.from_db"] = Model.__dict__["from_db"]
        _originals["ModelIterable.__iter__"] = ModelIterable.__iter__
        _originals["Model.refresh_from_db"] = Model.refresh_from_db
        _originals["QuerySet.bulk_update"] = QuerySet.bulk_update
        _originals["Atomic.__enter__"] = dj_transaction.Atomic.__enter__
        _originals["Model.save_base"] = Model.save_base
        Model.from_db = _wrap_from_db(Model.__dict__["from_db"])  # type: ignore[method-assign]
        ModelIterable.__iter__ = _model_iter  # type: ignore[method-assign]
        functools.update_wrapper(_refresh_from_db, _originals["Model.refresh_from_db"])
        Model.refresh_from_db = _refresh_from_db  # type: ignore[method-assign]
        functools.update_wrapper(_bulk_update, _originals["QuerySet.bulk_update"])
        QuerySet.bulk_update = _bulk_update  # type: ignore[method-assign]
        dj_transaction.Atomic.__enter__ = _atomic_enter  # type: ignore[method-assign]
        functools.update_wrapper(_save_base, _originals["Model.save_base"])
        Model.save_base = _save_base  # type: ignore[method-assign]
        lookups.install()
        _installed = True


def wrap_overridden_from_db(models: Iterable[type]) -> None:
    for model in models:
        for klass in model.__mro__:
            if klass is Model:
                break
            if isinstance(klass, type) and issubclass(klass, Model):
                wrap_model_from_db(klass)


def uninstall() -> None:
    """Remove the hooks (tests of the hooks themselves; not needed in applications)."""
    global _installed
    with _install_lock:
        if not _installed:
            return
        Model.from_db = _originals["Model.from_db"]  # type: ignore[method-assign]
        ModelIterable.__iter__ = _originals["ModelIterable.__iter__"]  # type: ignore[method-assign]
        Model.refresh_from_db = _originals["Model.refresh_from_db"]  # type: ignore[method-assign]
        QuerySet.bulk_update = _originals["QuerySet.bulk_update"]  # type: ignore[method-assign]
        dj_transaction.Atomic.__enter__ = _originals["Atomic.__enter__"]  # type: ignore[method-assign]
        for model, own in _wrapped_from_db.items():
            model.from_db = own  # type: ignore[attr-defined]
        _wrapped_from_db.clear()
        Model.save_base = _originals["Model.save_base"]  # type: ignore[method-assign]
        lookups.uninstall()
        _installed = False


def installed() -> bool:
    return _installed
