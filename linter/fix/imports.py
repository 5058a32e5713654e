"""The one import a fix needs (``from django.db.models import F``), added only when the
name is free: a module that already binds the name to something else gets no fix."""
from __future__ import annotations

from typing import Optional

import libcst as cst

from .uses import names_in


def _imported_from(stmt: cst.CSTNode, module: str, name: str) -> Optional[bool]:
    """True when ``stmt`` is ``from module import name``; False when it binds ``name``
    otherwise; None when it does not bind it."""
    if not isinstance(stmt, cst.SimpleStatementLine):
        return None
    for small in stmt.body:
        if isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
            source = cst.Module([]).code_for_node(small.module) if small.module else ""
            for alias in small.names:
                bound = alias.evaluated_alias or alias.evaluated_name
                if bound == name:
                    return source == module and not small.relative \
                        and alias.evaluated_name == name
        elif isinstance(small, cst.Import):
            for alias in small.names:
                if (alias.evaluated_alias or alias.evaluated_name.split(".")[0]) == name:
                    return False
        elif isinstance(small, (cst.Assign, cst.AnnAssign, cst.AugAssign)) \
                and name in names_in(small):
            return False
    return None


def binding(tree: cst.Module, module: str, name: str) -> Optional[bool]:
    """True: ``name`` is imported from ``module`` at the top level; None: it is free (no
    top-level binding, nor any mention anywhere); False: it is taken."""
    found: Optional[bool] = None
    for stmt in tree.body:
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)) and stmt.name.value == name:
            return False
        got = _imported_from(stmt, module, name)
        if got is False:
            return False
        found = found or got
    if found:
        return True
    return False if name in names_in(tree) else None


def with_import(tree: cst.Module, module: str, name: str, alias: str = "") -> cst.Module:
    """``tree`` with ``from module import name`` (``as alias`` when given) after its last
    top-level import (after the docstring when it has none)."""
    body = list(tree.body)
    at = 0
    for i, stmt in enumerate(body):
        if isinstance(stmt, cst.SimpleStatementLine) and any(
                isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body):
            at = i + 1
        elif i == 0 and isinstance(stmt, cst.SimpleStatementLine) \
                and isinstance(stmt.body[0], cst.Expr) \
                and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString)):
            at = 1
        elif isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            break
    named = f"{name} as {alias}" if alias else name
    new = cst.parse_statement(f"from {module} import {named}\n", config=tree.config_for_parsing)
    if at < len(body) and isinstance(body[at], (cst.FunctionDef, cst.ClassDef)):
        following = body[at]
        blank = sum(1 for line in following.leading_lines if line.comment is None)
        if blank < 2:                   # PEP 8: two blank lines before a top-level def
            following = following.with_changes(
                leading_lines=[cst.EmptyLine()] * (2 - blank) + list(following.leading_lines))
            body[at] = following
    body.insert(at, new)
    return tree.with_changes(body=body)
