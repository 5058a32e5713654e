"""One walk of a module's ``ast`` for the per-file facts (wrappers, unique keys, relations,
managers, class bases).

Each of those facts used to walk the whole tree on its own, expressions included: six walks
of every file, most of a per-file flake8 run's cost on a large codebase.  What they look for
are all statements (classes, functions, ``with`` blocks, ``return``), and statements only
live in statement lists, so one walk of the statements finds them all and skips the
expressions, most of a tree's nodes.

The walk is breadth-first over the statement tree, so the nodes come in the order
``ast.walk`` gives them (facts that keep the first or last of two same-named classes keep
the same one).  The last tree's result is kept: the facts of one file ask in turn.
"""
from __future__ import annotations

import ast
import dataclasses
from collections import deque
from typing import Optional, Union

Function = Union[ast.FunctionDef, ast.AsyncFunctionDef]

#: nodes that hold statement lists besides statements themselves
_HOLDERS = (ast.stmt, ast.excepthandler, ast.match_case)


@dataclasses.dataclass(frozen=True)
class TreeNodes:
    """A module's statements of the kinds the per-file facts read, in ``ast.walk`` order."""

    classes: tuple[ast.ClassDef, ...]
    functions: tuple[Function, ...]
    withs: tuple[Union[ast.With, ast.AsyncWith], ...]
    returns: tuple[ast.Return, ...]


_last: tuple[Optional[ast.AST], Optional[TreeNodes]] = (None, None)


def _walk_statements(tree: ast.AST) -> TreeNodes:
    classes: list = []
    functions: list = []
    withs: list = []
    returns: list = []
    queue: deque = deque([tree])
    while queue:
        node = queue.popleft()
        kind = type(node)
        if kind is ast.ClassDef:
            classes.append(node)
        elif kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
            functions.append(node)
        elif kind is ast.With or kind is ast.AsyncWith:
            withs.append(node)
        elif kind is ast.Return:
            returns.append(node)
        for field in node._fields:
            value = getattr(node, field, None)
            if type(value) is list and value and isinstance(value[0], _HOLDERS):
                queue.extend(value)
    return TreeNodes(tuple(classes), tuple(functions), tuple(withs), tuple(returns))


def tree_nodes(tree: ast.AST) -> TreeNodes:
    """The :class:`TreeNodes` of ``tree`` (one walk per tree; the last one is kept)."""
    global _last
    if _last[0] is tree and _last[1] is not None:
        return _last[1]
    found = _walk_statements(tree)
    _last = (tree, found)
    return found
