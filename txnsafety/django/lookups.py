"""Check-then-act (TXN105) on Django: the checks a queryset makes, and the model's unique keys.

A check is a queryset evaluation keyed on exact column values of its model that
found nothing: ``get()`` raising ``DoesNotExist``, ``exists()`` false, ``first()`` /
``last()`` returning None, ``count()`` returning 0 where the calling line tests it — or
``count()`` of some rows compared with a limit by the calling line (:mod:`txnsafety.limits`).  The public
methods are wrapped (``aexists``... run them through ``sync_to_async``); each costs one
call and one test of its result.  ``get()`` is not: ``DoesNotExist`` is caught where it
is made, so a ``get()`` that finds its row costs nothing.  The
keys are the ``AND``-ed exact lookups on the model's own columns
(``filter(email=e, tenant=t)``; a foreign key by its id); a lookup through a join
is no key.  ``get_or_create()`` / ``update_or_create()`` make their own lookup and
insert: not a check.  The insert is a ``save()`` of a new instance (:mod:`.hooks`).
"""
from __future__ import annotations

import functools
import logging
import sys
from typing import Any

from django.core.exceptions import ObjectDoesNotExist
from django.db.models import Model, QuerySet
from django.db.models.expressions import Col
from django.db.models.lookups import Exact

from .. import check_then_act, limits
from ..context import current_state
from ..checker import model_name, write_policy
from ..config import settings
from ..report import StompingError
from ..sites import user_frame
from . import transactions as txns

log = logging.getLogger("txnsafety")

_originals: dict[str, Any] = {}


def _keys(queryset: QuerySet) -> dict[str, Any]:
    """``{attname: value}`` of the exact lookups on the model's own columns, AND-ed."""
    query = queryset.query
    where = query.where
    if where.connector != "AND" or where.negated or query.is_sliced and query.low_mark:
        return {}
    concrete = queryset.model._meta.concrete_model
    base = query.base_table
    keys: dict[str, Any] = {}
    for child in where.children:
        if not isinstance(child, Exact):
            continue
        lhs, rhs = child.lhs, child.rhs
        if not isinstance(lhs, Col) or lhs.alias != base or hasattr(rhs, "resolve_expression"):
            continue
        field = lhs.target
        if getattr(field.model._meta, "concrete_model", None) is not concrete:
            continue
        keys[field.attname] = rhs
    return keys


def _check(queryset: QuerySet, kind: str, limit: bool = False) -> None:
    """The queryset was a check: remember it (never raises into the query)."""
    if not settings.enabled:
        return
    scope = current_state()[0]
    if scope is None:
        return
    try:
        model = queryset.model
        if write_policy(model) is None:
            return
        keys = _keys(queryset)
        if keys:
            check_then_act.note_lookup(scope, model._meta.concrete_model, keys, kind,
                                       txns.transaction_for(queryset.db), limit=limit)
    except StompingError:
        raise
    except Exception:
        log.exception("txnsafety: internal error while noting a check (the request goes on)")


def _does_not_exist(self: Exception, *args: Any, **kwargs: Any) -> None:
    """``ObjectDoesNotExist.__init__``: a ``get()`` found nothing.  Wrapping the exception
    instead of ``get()`` costs nothing when ``get()`` finds its row (nearly always); the
    queryset is ``get()``'s own local ``clone`` (private; pinned by test_private_api.py)."""
    Exception.__init__(self, *args, **kwargs)
    if settings.enabled and current_state()[0] is not None:
        frame = sys._getframe(1)
        if frame.f_code is _GET_CODE:
            clone = frame.f_locals.get("clone")
            if isinstance(clone, QuerySet) and not clone.query.combinator:
                _check(clone, "DoesNotExist")


_GET_CODE = QuerySet.get.__code__


def _exists(self: QuerySet) -> bool:
    found = _originals["exists"](self)
    if not found:
        _check(self, "exists() false")
    return found


def _first(self: QuerySet) -> Any:
    obj = _originals["first"](self)
    if obj is None:
        _check(self, "first() returned None")
    return obj


def _last(self: QuerySet) -> Any:
    obj = _originals["last"](self)
    if obj is None:
        _check(self, "last() returned None")
    return obj


def _count(self: QuerySet) -> int:
    number = _originals["count"](self)
    if not settings.enabled or current_state()[0] is None:
        return number
    if not number:
        if limits.tested(user_frame(1)):  # a count of none shown or asserted is no check
            _check(self, "count() found none")
    elif limits.compared_with_limit(user_frame(1)):
        _check(self, "count() under a limit", limit=True)
    return number


def _get_or_create(self: QuerySet, *args: Any, **kwargs: Any) -> Any:
    with check_then_act.atomic_block():
        return _originals["get_or_create"](self, *args, **kwargs)


def _update_or_create(self: QuerySet, *args: Any, **kwargs: Any) -> Any:
    with check_then_act.atomic_block():
        return _originals["update_or_create"](self, *args, **kwargs)


_WRAPPERS = {"exists": _exists, "first": _first, "last": _last, "count": _count,
             "get_or_create": _get_or_create, "update_or_create": _update_or_create}


def install() -> None:
    """Wrap the queryset methods (called by :func:`.hooks.install`, under its lock)."""
    if _originals:
        return
    for name, wrapper in _WRAPPERS.items():
        original = QuerySet.__dict__[name]
        _originals[name] = original
        functools.update_wrapper(wrapper, original)
        setattr(QuerySet, name, wrapper)
    ObjectDoesNotExist.__init__ = _does_not_exist  # type: ignore[method-assign]


def uninstall() -> None:
    for name, original in _originals.items():
        setattr(QuerySet, name, original)
    _originals.clear()
    if ObjectDoesNotExist.__dict__.get("__init__") is _does_not_exist:
        del ObjectDoesNotExist.__init__


# -- the insert ---------------------------------------------------------------------------

_unique: dict[type, tuple[frozenset[str], ...]] = {}


def unique_keys(model: type) -> tuple[frozenset[str], ...]:
    """The model's unique column sets (attnames): primary key, ``unique=True``,
    ``unique_together``, unconditional ``UniqueConstraint``; cached per model."""
    keys = _unique.get(model)
    if keys is None:
        meta = model._meta
        found: list[frozenset[str]] = []
        for field in meta.concrete_fields:
            if field.unique:  # the primary key too
                found.append(frozenset({field.attname}))

        def attnames(names: Any) -> frozenset[str]:
            return frozenset(meta.get_field(name).attname for name in names)

        for together in meta.unique_together:
            found.append(attnames(together))
        for constraint in getattr(meta, "total_unique_constraints", ()):
            if getattr(constraint, "fields", None):
                found.append(attnames(constraint.fields))
        keys = _unique[model] = tuple(found)
    return keys


def inserted(scope: Any, instance: Model, cls: type, using: str, key: Any, frame: Any) -> None:
    """``instance`` is being inserted: the act of a check-then-act? (``scope.lookups`` is set)."""
    from . import saves
    concrete = cls._meta.concrete_model
    values = {f.attname: instance.__dict__[f.attname] for f in concrete._meta.concrete_fields
              if f.attname in instance.__dict__}
    check_then_act.note_insert(scope, concrete, values, unique_keys(concrete), txns.transaction_for(using), key,
                               model_name(cls), lambda: saves.locate(frame, instance))
