"""What an ORM statement selects and locks, read off its ``QueryContext``: the mapped classes of its
entities and the tables a ``FOR UPDATE OF`` names (asked of FOR UPDATE statements and of statements
whose read site is wanted: see :mod:`.reads`)."""
from __future__ import annotations

from typing import Any


def entity_classes(context: Any) -> tuple[type, ...]:
    """The mapped classes the statement selects (not aliased ones), as its ``column_descriptions``
    name them, read from the compile state the statement was run with (private; pinned by test):
    ``column_descriptions`` builds a new one, about 20 us, once per FOR UPDATE statement."""
    try:
        return tuple(e.entity_zero.class_ for e in context.compile_state._entities
                     if getattr(getattr(e, "entity_zero", None), "is_mapper", False))
    except Exception:
        pass
    try:
        return tuple(d["entity"] for d in context.query.column_descriptions if isinstance(d.get("entity"), type))
    except Exception:  # a statement without ORM entities
        return ()


def locked_tables(for_update_arg: Any) -> frozenset[Any] | None:
    """The tables a ``FOR UPDATE OF`` names (None: no OF, every table of the FROM is locked)."""
    of = getattr(for_update_arg, "of", None) if for_update_arg is not None else None
    if not of:
        return None
    tables = set()
    for element in of:
        table = getattr(element, "table", None)  # a column: its table
        tables.add(element if table is None else table)
        for parent in getattr(element, "_cloned_set", ()) or ():  # an alias of a table
            tables.add(parent)
    return frozenset(tables)
