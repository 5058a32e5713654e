"""Where a function lies in a file: the line span of a qualified name.

A bug is named by its function (``vote``, ``Order.mark_paid``, ``outer.inner``), not
by lines, so the entry stays true when a finding moves inside the function.
"""
from __future__ import annotations

import ast
import warnings
from pathlib import Path
from typing import Iterator, Optional


def _defs(body: list, prefix: str) -> Iterator[tuple[str, ast.AST]]:
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            qual = f"{prefix}{node.name}"
            yield qual, node
            yield from _defs(node.body, qual + ".")
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            # functions defined under `if TYPE_CHECKING:` / `try:` keep their plain names
            for block in ("body", "orelse", "finalbody", "handlers"):
                yield from _defs(getattr(node, block, []) or [], prefix)
        elif isinstance(node, ast.ExceptHandler):
            yield from _defs(node.body, prefix)


def function_span(path: Path, qualname: str) -> Optional[tuple[int, int]]:
    """(first line including decorators, last line) of ``qualname`` in ``path``, or None."""
    try:
        source = path.read_bytes()
    except OSError:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            tree = ast.parse(source)
        except SyntaxError:
            return None
    for qual, node in _defs(tree.body, ""):
        if qual == qualname and not isinstance(node, ast.ClassDef):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            return first, node.end_lineno or node.lineno
    return None
