"""The name an ``ast`` node is known by: ``models.ForeignKey(...)`` is ``ForeignKey``.

Facts read from ``ast`` (unique keys, relations, migrate receivers) recognise a field, a
constraint or a decorator by its last name, however the module imported it.
"""
from __future__ import annotations

import ast


def last_name(node: ast.AST) -> str:
    """The last name of a call's callee, an attribute or a name (``""`` for anything else)."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""
