"""What a flushed UPDATE sends, and which of its columns carry a value computed from the read.

The flush's own test (``persistence._collect_update_commands``), asked of the
attributes set since the load only (``InstanceState.committed_state``, private;
pinned by test): a column set back to its loaded value is not sent; a column set to
a SQL expression (``Model.n + 1``) is computed by the database (atomic); a value
that is not derived from the loaded one (:mod:`txnsafety.values`) is a blind write.
"""
from __future__ import annotations

from typing import Any

from sqlalchemy.orm.base import NEVER_SET, NO_VALUE
from sqlalchemy.sql.elements import ClauseElement

from ..provenance import derived_somewhere
from ..values import NOT_LOADED, looks_derived, vouched_by_code


def from_read(values: dict[str, Any], committed: dict[str, Any], changed: list[str],
              relations: frozenset[str], model: Any = None) -> list[str]:
    """The changed columns whose new value may be computed from the loaded one
    (``committed`` holds what was loaded; ``NO_VALUE`` when the column never was).
    A changed number or date counts only when some code derives ``model``'s attribute
    from itself (:func:`txnsafety.provenance.derived_somewhere`)."""
    derived = []
    for key in changed:
        value, loaded = values.get(key), committed.get(key, NO_VALUE)
        if type(value) in _NUMBERS and type(loaded) in _NUMBERS and key not in relations:
            if model is None or derived_somewhere(model, key):  # (one dict look-up once read)
                derived.append(key)
        elif looks_derived(value, _loaded(loaded), relation=key in relations) and (
                model is None or not vouched_by_code(value, _loaded(loaded)) or derived_somewhere(model, key)):
            derived.append(key)
    return derived


_NUMBERS = frozenset({int, float})


def _loaded(value: Any) -> Any:
    return NOT_LOADED if value is NO_VALUE or value is NEVER_SET else value


def changed_columns(values: dict[str, Any], committed: dict[str, Any],
                    equality: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The columns the coming UPDATE sends: (set to a value, set to a SQL expression).

    The flush's own test (``persistence._collect_update_commands``): a column set
    since the load is sent unless the attribute's equality says it is back to the
    loaded value; an expression (``Model.n + 1``) is computed by the database.
    Only the attributes set since the load are looked at (``committed`` holds
    their loaded values), usually one or two; relationships are not columns.
    """
    changed: list[str] = []
    atomic: list[str] = []
    for key, loaded in committed.items():
        is_equal = equality.get(key)
        if is_equal is None:
            continue  # a relationship or another non-column attribute
        value = values.get(key, _MISSING)
        if type(value) in _PLAIN_VALUES:
            if is_equal(value, loaded) is not True:
                changed.append(key)
        elif hasattr(value, "__clause_element__") or isinstance(value, ClauseElement):
            atomic.append(key)
        elif value is _MISSING or is_equal(value, loaded) is not True:
            changed.append(key)
    return changed, atomic


#: Value types that are never SQL expressions: no need to ask (most columns hold one).
_PLAIN_VALUES = frozenset({int, str, float, bool, bytes, type(None)})
_MISSING: Any = object()
