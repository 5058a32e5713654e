"""Unique keys that models declare: an insert they cover cannot duplicate a row.

A check-then-act (``if not M.objects.filter(code=c).exists(): M.objects.create(code=c)``)
loses nothing when ``code`` is unique: the second of two racing inserts fails with
``IntegrityError`` instead of adding a duplicate.  This module reads those keys from
the ``ast`` of model classes, for Django and SQLAlchemy alike:

* Django: ``unique=True`` and ``primary_key=True`` fields, ``OneToOneField``,
  ``Meta.unique_together`` and ``Meta.constraints`` with ``UniqueConstraint(fields=...)``;
* SQLAlchemy: ``Column(..., unique=True)`` / ``mapped_column(..., primary_key=True)`` and
  ``__table_args__`` entries ``UniqueConstraint("a", "b")``, ``PrimaryKeyConstraint``
  and ``Index(..., unique=True)``.

A relation ``user`` and its column ``user_id`` are one column (``column()``), as is ``pk`` and ``id``.
Models are known by class name, as everywhere in the linter.  Partial unique indexes
(with a condition) still count: the linter cannot tell whether the insert meets the condition.
"""
from __future__ import annotations

import ast
import re
from typing import Iterable

UniqueKeys = dict[str, list[frozenset[str]]]

_HINT = re.compile(r"unique|primary_key|OneToOneField|PrimaryKeyConstraint")
_ONE_TO_ONE = {"OneToOneField"}


def _last(node: ast.AST) -> str:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def _true_kwarg(call: ast.Call, name: str) -> bool:
    return any(k.arg == name and isinstance(k.value, ast.Constant) and k.value.value is True
               for k in call.keywords)


def _strings(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [s for el in node.elts for s in _strings(el)]
    if isinstance(node, ast.Attribute):          # Column objects: Index("ix", Model.a, unique=True)
        return [node.attr]
    if isinstance(node, ast.Name):
        return [node.id]
    return []


def column(name: str) -> str:
    """One spelling per column: ``user_id`` is the ``user`` relation's column, ``pk`` is ``id``."""
    if name == "pk":
        return "id"
    return name[:-3] if name.endswith("_id") and len(name) > 3 else name


def _field_keys(cls: ast.ClassDef) -> list[frozenset[str]]:
    keys: list[frozenset[str]] = []
    for stmt in cls.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            target, value = stmt.targets[0].id, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            target, value = stmt.target.id, stmt.value
        else:
            continue
        if not isinstance(value, ast.Call):
            continue
        kind = _last(value)
        if kind in _ONE_TO_ONE or _true_kwarg(value, "unique") or _true_kwarg(value, "primary_key"):
            keys.append(frozenset({target}))
    return keys


def _declared_keys(node: ast.AST) -> list[list[str]]:
    """Unique column lists in ``Meta.unique_together``, ``constraints`` or ``__table_args__``."""
    out: list[list[str]] = []
    for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
        kind = _last(call)
        if kind in ("UniqueConstraint", "PrimaryKeyConstraint"):
            fields = [s for k in call.keywords if k.arg == "fields" for s in _strings(k.value)]
            out.append(fields or [s for a in call.args for s in _strings(a)])
        elif kind == "Index" and _true_kwarg(call, "unique"):
            out.append([s for a in call.args[1:] for s in _strings(a)])
    return out


def _meta_keys(cls: ast.ClassDef) -> list[list[str]]:
    out: list[list[str]] = []
    for stmt in cls.body:
        if isinstance(stmt, ast.ClassDef) and stmt.name == "Meta":
            for inner in stmt.body:
                if isinstance(inner, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "unique_together"
                                                         for t in inner.targets):
                    value = inner.value
                    groups = value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]
                    if groups and all(isinstance(g, ast.Constant) for g in groups):
                        groups = [value]          # unique_together = ("a", "b")
                    out.extend(_strings(g) for g in groups)
                elif isinstance(inner, ast.Assign):
                    out.extend(_declared_keys(inner.value))
        elif isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__table_args__"
                                                  for t in stmt.targets):
            out.extend(_declared_keys(stmt.value))
    return out


def unique_keys(sources: Iterable[tuple[str, ast.AST]]) -> UniqueKeys:
    """Model class name -> the column sets it declares unique (over all ``sources``)."""
    found: UniqueKeys = {}
    for text, tree in sources:
        if not _HINT.search(text):
            continue
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            keys = _field_keys(cls) + [frozenset(k) for k in _meta_keys(cls) if k]
            if keys:
                found.setdefault(cls.name, []).extend(frozenset(map(column, k)) for k in keys)
    return found


def covered(keys: list[frozenset[str]], given: frozenset[str] | None) -> bool:
    """Whether an insert that sets ``given`` (None: not known) meets a declared unique key."""
    if not keys:
        return False
    if given is None:
        return True            # the insert's values are not visible: the model's keys decide
    given = frozenset(map(column, given))
    return any(k <= given for k in keys)
