"""Where the checker hooks into Django's ORM.  Installed once by the app's ``ready()``.

Reads
    See :mod:`txnsafety.django.reads`: one stamp per statement when a queryset is
    evaluated, row by row for ``iterator()``, ``raw()`` and ``select_for_update()``.

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
from typing import Any, Iterable

from django.db import DEFAULT_DB_ALIAS, router, transaction as dj_transaction
from django.db.models import Model
from django.db.models.query import QuerySet

from .. import versioned_writes
from ..checker import entry_of, guarded, model_name, record_read, write, write_policy
from ..codes import Code
from ..config import settings
from ..context import current_scope, current_state
from ..policies import Policy, cached_policy
from ..report import StompingError, Violation, report
from ..sites import user_trace
from . import lookups, reads, saves, transactions as txns
from .reads import checked as _checked

log = logging.getLogger("txnsafety")

_installed = False
_install_lock = threading.Lock()
_MISSING: Any = object()
_originals: dict[str, Any] = {}


# -- helpers -------------------------------------------------------------------------


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
                created: bool | None = None, versioned: bool = False, frame: Any = None,
                batch: bool = False) -> None:
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
    scope, _, _ = current_state()
    if scope is None:
        return
    try:
        cls = type(instance)
        policy = cached_policy(cls, _MISSING)  # write_policy's, inline (every save)
        if policy is _MISSING or (policy is None and settings.strict):
            policy = write_policy(cls)
        if policy is None:
            return
        state = instance._state
        using = using or state.db or DEFAULT_DB_ALIAS
        if created is None:
            created = bool(state.adding)
        txn = txns.transaction_for(using)
        key = instance.pk if using == DEFAULT_DB_ALIAS else row_key(instance.pk, using)
        sent = None if fields is None else _field_names(cls, fields)
        written = sent
        if created and scope.lookups:  # an insert after a check of this request? (TXN105)
            lookups.inserted(scope, instance, cls, using, key, frame if frame is not None else sys._getframe(1))
        if not created:
            if entry_of(scope, instance) is None:  # taking in the read its statement left on it
                _earlier_read(scope, instance)
            if not versioned and sent is not None:
                written = saves.from_read(instance, cls, sent, batch)
                versioned = not written  # nothing from the read: this write cannot stomp
        if policy.versioned_field and not versioned and not created:
            _check_unversioned_write(instance, policy, key, txn)
        # record_write's last step, without its look-ups again (scope, policy, transaction)
        write(scope, instance, model=cls, policy=policy, key=key, written=written if written else sent,
              transaction=txn, created=created, versioned=versioned, history_model=cls._meta.concrete_model or cls,
              frame=frame if frame is not None else sys._getframe(1), locate=saves.locate, sent=sent)
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
    if not raw and settings.enabled and current_state()[0] is not None and not self._meta.auto_created:
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
            judge_write(obj, using, fields, created=False, batch=True)
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
        _originals["QuerySet.bulk_update"] = QuerySet.bulk_update
        _originals["Atomic.__enter__"] = dj_transaction.Atomic.__enter__
        _originals["Model.save_base"] = Model.save_base
        reads.install()
        functools.update_wrapper(_bulk_update, _originals["QuerySet.bulk_update"])
        QuerySet.bulk_update = _bulk_update  # type: ignore[method-assign]
        dj_transaction.Atomic.__enter__ = _atomic_enter  # type: ignore[method-assign]
        functools.update_wrapper(_save_base, _originals["Model.save_base"])
        Model.save_base = _save_base  # type: ignore[method-assign]
        lookups.install()
        _installed = True


def uninstall() -> None:
    """Remove the hooks (tests of the hooks themselves; not needed in applications)."""
    global _installed
    with _install_lock:
        if not _installed:
            return
        reads.uninstall()
        QuerySet.bulk_update = _originals["QuerySet.bulk_update"]  # type: ignore[method-assign]
        dj_transaction.Atomic.__enter__ = _originals["Atomic.__enter__"]  # type: ignore[method-assign]
        Model.save_base = _originals["Model.save_base"]  # type: ignore[method-assign]
        lookups.uninstall()
        _installed = False


def installed() -> bool:
    return _installed
