"""How a written value was made: computed by the database, written blind, or derived from the read.

A lost update needs a value computed in Python from a value read earlier.  The
database itself loses nothing when

* the column is assigned a SQL expression (Django ``F("n") + 1``, SQLAlchemy
  ``Model.n + 1``): the database computes it from the row as it is at the write;
* a partial write (Django ``save(update_fields=[...])``, SQLAlchemy's flush of the
  changed columns) sets a value that does not come from the read: a nickname from a
  form, ``now()`` on login.  Last writer wins by design; the write carries no stale copy.

The checker cannot follow data flow at run time, so "does not come from the read" is
judged from the value the column held when it was loaded and the value written, by
the ways read-modify-writes compute (see :func:`looks_derived`).  A number or a date
that changed could be either; for those (:func:`vouched_by_code`) the integrations ask
the code that assigns the attribute (:mod:`txnsafety.provenance`).  Integrations ask
:func:`is_expression` and :func:`looks_derived` per written column and hand the
checker only the columns written from the read.
"""
from __future__ import annotations

import datetime as _dt
from decimal import Decimal
from typing import Any

#: A column not loaded (deferred and never fetched) cannot have been derived from the read.
NOT_LOADED: Any = object()

#: How far from the clock a timestamp may be and still be "now" (a login, ``auto_now``).
NOW_WINDOW = _dt.timedelta(minutes=10)

_NUMBERS = (int, float, Decimal)
_COLLECTIONS = (list, tuple, set, frozenset, dict)


def is_expression(value: Any) -> bool:
    """True for a SQL expression the database evaluates (Django's ``F()``/``Func``/``Value``
    combinations, SQLAlchemy's ``ColumnElement``)."""
    if value is None or type(value) in _PLAIN:
        return False
    return (hasattr(value, "resolve_expression")             # Django expressions
            or hasattr(value, "__clause_element__")          # SQLAlchemy instrumented attributes
            or type(value).__module__.startswith("sqlalchemy.sql"))  # SQLAlchemy ClauseElement


_PLAIN = frozenset({int, str, float, bool, bytes, Decimal, _dt.datetime, _dt.date})


def looks_derived(new: Any, loaded: Any, *, relation: bool = False) -> bool:
    """Could ``new`` have been computed from ``loaded`` (the column's value at the read)?

    The ways a read-modify-write computes, and nothing else:

    * the loaded value written back unchanged (a stale copy);
    * a number (not a bool, not a foreign key: ``relation``) — arithmetic on a counter or a balance;
    * text that contains the loaded text or is contained in it, or equals it but for
      case (appending a line, a signature, title-casing);
    * a collection sharing an item (a key) with the loaded one (appending to a JSON list);
    * a date or time that is not "now" (``expires += timedelta(days=30)``).

    Anything else — text unrelated to the old text (a form field), ``now()``, a flag, a
    foreign key, ``None``, a UUID — is judged blind.  A column that was not loaded
    (:data:`NOT_LOADED`) cannot have been derived.  So a toggle (``flag = not flag``)
    or a status set after checking another column is not seen as derived.
    """
    if loaded is NOT_LOADED:
        return False
    try:
        if new is loaded or (type(new) is type(loaded) and new == loaded):
            return True
        if relation or isinstance(new, bool) or new is None:
            return False
        if isinstance(new, _NUMBERS):
            return True
        if isinstance(new, str):
            return isinstance(loaded, str) and bool(loaded) and bool(new) and (
                loaded in new or new in loaded or new.casefold() == loaded.casefold())
        if isinstance(new, _dt.datetime):
            return not _is_now(new)
        if isinstance(new, _dt.date):
            return new != _dt.date.today()
        if isinstance(new, _dt.timedelta):
            return True
        if isinstance(new, _COLLECTIONS):
            return isinstance(loaded, _COLLECTIONS) and _overlap(new, loaded)
    except Exception:  # a value that cannot be compared: assume the worst
        return True
    return False


def vouched_by_code(new: Any, loaded: Any, *, alone: bool = False) -> bool:
    """True when ``looks_derived`` said yes only because of the kind of value, so the code
    that assigns the attribute decides (:mod:`txnsafety.provenance`), not the value:

    * a number or a date/time that changed (``n += 1`` or a form's quantity?);
    * a value equal to the one loaded but not the same object: the code assigned it (a
      form re-saving the text it showed), it was not left stale — for the kinds a
      database driver makes afresh for each row (text and bytes of two characters or
      more, numbers outside CPython's small-int cache, floats, decimals, dates);
    * ``alone``: a number or date that is the only column of a ``bulk_update()``, even
      unchanged (a position that did not move: the loop set it, see Django's ``saves``).

    A value that *is* the object loaded (``None``, a small int, or any column nobody
    touched) beside columns that changed is a stale copy written back: never vouched.
    """
    if isinstance(new, bool) or new is None:
        return False
    kind_by_code = isinstance(new, _NUMBERS) or isinstance(new, (_dt.date, _dt.time, _dt.timedelta))
    try:
        if new is loaded:
            return alone and kind_by_code
        if new == loaded:
            return _fresh(new) or (alone and kind_by_code)
        return kind_by_code
    except Exception:
        return False


def _fresh(value: Any) -> bool:
    """Whether equal values of this kind are distinct objects (no cache or interning shares them)."""
    if isinstance(value, (str, bytes)):
        return len(value) > 1
    if isinstance(value, int):
        return not -5 <= value <= 256
    return isinstance(value, (float, Decimal, _dt.date, _dt.time, _dt.timedelta))


def _is_now(value: _dt.datetime) -> bool:
    if value.tzinfo is not None:
        now = _dt.datetime.now(_dt.timezone.utc)
        return abs(value - now) <= NOW_WINDOW
    # naive: local time or UTC, depending on the application's settings
    return (abs(value - _dt.datetime.now()) <= NOW_WINDOW
            or abs(value - _dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None)) <= NOW_WINDOW)


def _overlap(new: Any, loaded: Any) -> bool:
    if not loaded or not new:
        return False
    if isinstance(new, dict) or isinstance(loaded, dict):
        return bool(set(_keys(new)) & set(_keys(loaded)))
    try:
        return bool(set(new) & set(loaded))
    except TypeError:  # unhashable items (a list of dicts): compare one by one
        return any(item in new for item in loaded)


def _keys(value: Any) -> Any:
    return value.keys() if isinstance(value, dict) else value
