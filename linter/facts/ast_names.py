"""The name an ``ast`` node is known by (``models.ForeignKey(...)`` is ``ForeignKey``), and
the fields a class body declares.

Facts read from ``ast`` (unique keys, relations, migrate receivers) recognise a field, a
constraint or a decorator by its last name, however the module imported it.
"""
from __future__ import annotations

import ast
from typing import Iterator


def last_name(node: ast.AST) -> str:
    """The last name of a call's callee, an attribute or a name (``""`` for anything else)."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def field_calls(cls: ast.ClassDef) -> Iterator[tuple[str, ast.Call]]:
    """A class body's ``name = Call(...)`` and ``name: T = Call(...)``: its declared fields.

    SQLAlchemy's ``@declared_attr def parent_id(cls): return Column(..., unique=True)`` is a
    field too (mixins and models whose column needs the class, as a foreign key to a table
    named at mapping time): the column is what the function returns, named after it."""
    for stmt in cls.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            target, value = stmt.targets[0].id, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            target, value = stmt.target.id, stmt.value
        elif is_declared_attr(stmt):
            target, value = stmt.name, _returned(stmt)
        else:
            continue
        if isinstance(value, ast.Call):
            yield target, value


def is_declared_attr(stmt: ast.stmt) -> bool:
    """``@declared_attr`` (``@sa.orm.declared_attr``, ``@declared_attr.cascading``,
    ``@declared_attr.directive``) on a function in a class body."""
    return isinstance(stmt, ast.FunctionDef) and any(
        "declared_attr" in (last_name(d), last_name(d.value) if isinstance(d, ast.Attribute) else "")
        for d in stmt.decorator_list)


def _returned(func: ast.FunctionDef) -> "ast.expr | None":
    """What a function's last statement returns (None when it ends otherwise)."""
    last = func.body[-1] if func.body else None
    return last.value if isinstance(last, ast.Return) else None
