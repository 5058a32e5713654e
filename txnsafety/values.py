"""How a written value was made: computed by the database, written blind, or derived from the read.

A lost update needs a value computed in Python from a value read earlier.  The
database itself loses nothing when

* the column is assigned a SQL expression (Django ``F("n") + 1``, SQLAlchemy
  ``Model.n + 1``): the database computes it from the row as it is at the write;
* a partial write (Django ``save(update_fields=[...])``, SQLAlchemy's flush of the
  changed columns) sets a value that does not come from the read: a nickname from a
  form, ``now()`` on login.  Last writer wins by design; the write carries no stale copy.

The checker cannot follow data flow at run time.  The values can only say "blind": a
value no read-modify-write computes (``now()``, a flag, a foreign key pointed elsewhere,
text unrelated to the old text) is written blind (:func:`looks_derived`).  They cannot
say "derived": a form re-submitting the same text, or an address containing the old one,
looks derived and is not.  So every other value is derived only when the code that
assigns the attribute computes it from its own old value (:func:`vouched_by_code`,
:mod:`txnsafety.provenance`); the one exception is a stale copy, the very object loaded
written back beside changed columns.  Integrations ask :func:`is_expression`,
:func:`looks_derived` and :func:`vouched_by_code` per written column and hand the
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
    """True when the code that assigns the attribute decides whether ``new`` comes from the
    read (:mod:`txnsafety.provenance`), not the value: every value ``looks_derived`` let
    through except a stale copy.

    Whether a value derives from the read cannot be decided by comparing values: a form
    re-submitting the text it showed, a PUT repeating a number, an e-mail address that
    contains the old one (``example.com`` -> ``*.example.com``) all look derived and are
    written blind.  So a value that is not the very object loaded counts as derived only
    when some code computes that attribute from its own old value; where the checker cannot
    see such code, the write is blind.

    A value that *is* the object loaded (``None``, a small int, or any column nobody
    touched) beside columns that changed is a stale copy written back: that is data flow
    the checker sees (nothing assigned it), never vouched — except ``alone``: a number or
    date that is the only column of a ``bulk_update()``, even unchanged (a position that
    did not move: the loop set it, see Django's ``saves``).
    """
    if new is None:
        return False
    if new is loaded:
        return alone and not isinstance(new, bool) and (
            isinstance(new, _NUMBERS) or isinstance(new, (_dt.date, _dt.time, _dt.timedelta)))
    return True


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
