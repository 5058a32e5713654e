"""Per-class facts of a mapped class the SQLAlchemy integration asks for, computed once."""
from __future__ import annotations

import operator
from typing import Any


class ClassInfo:
    __slots__ = ("versioned", "columns", "loaded_columns", "equality", "plain_equality", "relations", "tables")

    def __init__(self, cls: type) -> None:
        from sqlalchemy import inspect
        mapper = inspect(cls)
        self.versioned = mapper.version_id_col is not None
        self.columns = tuple(prop.key for prop in mapper.column_attrs)
        self.loaded_columns = frozenset(prop.key for prop in mapper.column_attrs if not prop.deferred)
        #: column key -> the attribute's own equality: what the flush compares a set value
        #: with the loaded one by (``AttributeImpl.is_equal``, private; pinned by test).
        self.equality: dict[str, Any] = {key: mapper.class_manager[key].impl.is_equal for key in self.columns}
        #: the columns whose equality is plain ``==`` (SQLAlchemy's default ``compare_values``, or
        #: ``operator.eq``): a write's quick path compares their plain values inline, no call
        self.plain_equality = frozenset(key for key, is_equal in self.equality.items() if _plain(is_equal))
        #: foreign-key columns: assigning one points at another row, it is not arithmetic
        self.relations = frozenset(prop.key for prop in mapper.column_attrs
                                   if any(column.foreign_keys for column in prop.columns))
        #: the tables of the class (a FOR UPDATE OF names tables)
        self.tables = frozenset(mapper.tables)


def _plain(is_equal: Any) -> bool:
    from sqlalchemy.sql.type_api import TypeEngine
    return is_equal is operator.eq or getattr(is_equal, "__func__", None) is TypeEngine.compare_values


classes: dict[type, ClassInfo] = {}


def info(cls: type) -> ClassInfo:
    found = classes.get(cls)
    if found is None:
        found = classes[cls] = ClassInfo(cls)
    return found


def forget_classes() -> None:
    """Drop cached class facts (policies declared after first use; tests)."""
    classes.clear()
