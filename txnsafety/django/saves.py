"""What a Django ``save()`` writes, and whose call it is.

Writes are judged at ``Model.save_base`` (what ``save()``, ``asave()``, ``create()``
and fixture loading call), not at the ``pre_save`` signal: an application may send
``pre_save`` itself (before a queryset ``update(... F() ...)``, say) and that writes
no row.  ``save_base`` runs before it opens its own atomic block for multi-table
inheritance, so the transaction seen is the caller's.

Three facts are handed to the checker with each write:

* **which columns carry a value from the read** (:func:`from_read`): a column
  assigned an expression (``F("balance") + 1``) is computed by the database; a
  column of a partial write (``update_fields``) holding a value not derived from
  the one loaded (:mod:`txnsafety.values`) is a blind write.  Neither loses an
  update.  The values loaded are kept on the instance by ``from_db``
  (:data:`LOADED`), as Django's docs suggest with ``_loaded_values``;
* **where the write was decided** (:func:`locate`): the first frame past the
  instance's own ``save()`` overrides (``super().save()`` is not the user's call);
  when that frame is library code reached through the request handler (a
  middleware, a third-party view), the library's call is named rather than the
  nearest user frame up the stack;
* **whether Django itself wrote** (``django.contrib``: ``update_last_login``, session,
  password and admin bookkeeping): not reported by default.
"""
from __future__ import annotations

import os
from typing import Any, Iterable

from ..config import settings
from ..sites import Site, is_library_file, register_boundaries, site_from, site_past, sites_wanted, wants_site
from ..provenance import derived_somewhere
from ..values import NOT_LOADED, is_expression, looks_derived, vouched_by_code

#: ``instance.__dict__[LOADED]``: ``(request token, field attnames, values)`` of the last
#: load from the database under a checker scope, or ``(request token, {attname: value})``
#: after a refresh.  A queryset evaluated whole puts its statement's read (a
#: :class:`LoadRead`) where the token is: the row's read stamp, taken when the checker
#: asks (:mod:`.reads`).  Pickled with the instance: a copy cached by one request and
#: saved in a later one is known to hold an earlier read.
LOADED = "_txnsafety_loaded"


class LoadRead(tuple):
    """The read of one statement, shared by the ``LOADED`` marks of its rows:
    ``(request token, tick, transaction, leases, site, for_update)``, a read stamp
    without the entity.

    Carried on the rows instead of stamped into the request's ``stamps`` (one dict entry
    per row, made by a C loop but still +3 points on a 200-row list): the checker takes
    it when it asks about a row, and most rows are never asked about.  A pickled or
    deep-copied row carries no transaction or lease: the read becomes a fresh object
    that is no request's token (an earlier read, as a plain token's pickle is).
    """

    __slots__ = ()

    def __reduce__(self) -> tuple[Any, ...]:
        return object, ()


_SAVE_METHODS = frozenset({"save", "asave", "save_base", "_save_parents", "_save_table"})


def loaded_values(instance: Any) -> dict[str, Any] | None:
    """``{attname: value}`` as loaded, or None when the instance was not loaded under a scope."""
    mark = instance.__dict__.get(LOADED)
    if type(mark) is not tuple:
        return None
    if len(mark) == 3:
        return dict(zip(mark[1], mark[2]))
    return mark[1] if len(mark) == 2 and isinstance(mark[1], dict) else None


def loaded_token(instance: Any) -> Any:
    """The request token of the instance's load (see :data:`LOADED`), or None."""
    mark = instance.__dict__.get(LOADED)
    if type(mark) is not tuple or not mark:
        return None
    token = mark[0]
    return token[0] if type(token) is LoadRead else token


def merge_refresh(instance: Any, temp: Any, token: Any) -> None:
    """``refresh_from_db`` copied ``temp``'s fields onto ``instance``: so are their loaded values."""
    fresh = loaded_values(temp)
    if fresh is None:
        return
    values = loaded_values(instance) or {}
    values.update(fresh)
    instance.__dict__[LOADED] = (token, values)


def from_read(instance: Any, model: type, written: frozenset[str] | None,
              batch: bool = False) -> frozenset[str] | None:
    """The columns of this write whose value may come from the read (``None``: the whole row).

    ``written`` is the set of field names the write sends (``None``: ``save()`` without
    ``update_fields``, which writes every column, including all the ones nobody set).
    ``batch``: a ``bulk_update()``; of one column, it is the idiom after a loop that sets
    that column on each object, so a number or date still at its loaded value was set
    too (a position that did not move) and the code decides whether it is derived.
    """
    meta = model._meta
    if written is None:
        return None
    loaded = loaded_values(instance)
    keep = []
    for name in written:
        try:
            field = meta.get_field(name)
        except Exception:
            keep.append(name)
            continue
        attname = getattr(field, "attname", name)
        value = instance.__dict__.get(attname, NOT_LOADED)
        if value is NOT_LOADED or is_expression(value):
            continue  # never set, or computed by the database
        if getattr(field, "auto_now", False):
            continue  # Django sets it to now() inside save_base
        before = loaded.get(attname, NOT_LOADED) if loaded is not None else _UNKNOWN
        if before is _UNKNOWN:
            keep.append(name)
        elif looks_derived(value, before, relation=bool(field.is_relation)) and (
                field.is_relation or not vouched_by_code(value, before, alone=batch and len(written) == 1)
                or derived_somewhere(model, attname)):
            keep.append(name)  # (a number or date: derived only if some code derives it)
    return frozenset(keep)


#: The instance was not loaded under a scope: what it held is unknown (assume derived).
_UNKNOWN: Any = object()


def expressions_in(instance: Any, model: type) -> bool:
    """True when some concrete field holds an expression (a whole-row save with ``F()``)."""
    return any(is_expression(instance.__dict__.get(f.attname)) for f in model._meta.concrete_fields)


# -- where the write was decided ---------------------------------------------------------

_DJANGO = os.path.dirname(os.path.dirname(os.path.abspath(__import__("django").__file__))) + os.sep
_CONTRIB = os.path.join(_DJANGO, "django", "contrib") + os.sep
#: Library frames a request crosses between the server and the view: a user frame found
#: above one of them is a middleware or a test client call, not the code that wrote.
_BOUNDARIES = tuple(os.path.join(_DJANGO, "django", *parts) for parts in (
    ("core", "handlers") + ("",), ("utils", "deprecation.py"), ("test", "client.py")))
#: Reads by library code beyond those (a generic view's ``get_object``) name the frame
#: past the ORM's own (:func:`txnsafety.sites.site_from`), as writes name the library's call.
register_boundaries(_BOUNDARIES, (os.path.join(_DJANGO, "django", "db") + os.sep,))

_REFRESH_METHODS = frozenset({"refresh_from_db", "arefresh_from_db"})


def refresh_site(instance: Any, frame: Any) -> Site | None:
    """Where ``instance.refresh_from_db()`` was called: past the model's own overrides
    (``super().refresh_from_db()``), as a write's site is past its ``save()`` overrides.
    None while the model's reads are not located (the ``read_sites`` setting)."""
    if not ((sites_wanted or settings.read_sites == "always") and wants_site(type(instance))):
        return None
    return site_past(frame, instance, _REFRESH_METHODS)


def locate(frame: Any, instance: Any) -> tuple[Site | None, bool]:
    """``(write site, framework-internal)`` of a save whose innermost checked frame is ``frame``.

    Frames of txnsafety and of the instance's own save methods (Django's and the
    model's overrides calling ``super().save()``) are passed over; the next one is
    the direct caller.  Django's own apps (``django.contrib``) writing is
    framework-internal.  A direct caller in other library code names itself when the
    nearest user frame above it lies beyond the request handler (a middleware);
    otherwise the nearest user frame is the site.
    """
    caller = _direct_caller(frame, instance)
    if caller is None:
        return site_from(frame), False
    filename = caller.f_code.co_filename
    if not is_library_file(filename, caller.f_globals):
        return Site(filename, caller.f_lineno, caller.f_code.co_name), False
    if os.path.abspath(filename).startswith(_CONTRIB):
        return Site(filename, caller.f_lineno, caller.f_code.co_name), True
    above: Any = caller
    while above is not None:
        name = above.f_code.co_filename
        if not is_library_file(name, above.f_globals):
            return Site(name, above.f_lineno, above.f_code.co_name), False
        if os.path.abspath(name).startswith(_BOUNDARIES):
            return Site(filename, caller.f_lineno, caller.f_code.co_name), False
        above = above.f_back
    return site_from(caller), False


def _direct_caller(frame: Any, instance: Any) -> Any:
    """The first frame above ``frame`` that is neither txnsafety's nor one of the
    instance's own save methods; None when the stack ends first."""
    from ..sites import _PACKAGE_DIR
    package = _PACKAGE_DIR + os.sep
    while frame is not None:
        code = frame.f_code
        if code.co_filename.startswith(package):
            frame = frame.f_back
            continue
        if code.co_name in _SAVE_METHODS and frame.f_locals.get("self") is instance:
            frame = frame.f_back
            continue
        return frame
    return None


def field_list(names: Iterable[str] | None) -> str:
    """What a report says about the columns written (names only, never values)."""
    return "the whole row" if names is None else ", ".join(sorted(names)) or "(none)"
