"""What makes a finding the same finding after the code around it moves.

GitHub code scanning and baselines match findings across runs by fingerprint.  A
fingerprint built from the line number, or from the path as the user happened to spell it
(``./x.py``, ``x.py``, ``/home/me/proj/x.py``), changes on every push and closes and
reopens alerts.  Ours hashes:

* the path relative to the project root (see :mod:`.settings`),
* the code,
* the qualified name of the enclosing function (``Shop.checkout``; none at module level),
* the message with every line number removed,

plus, for SARIF, an occurrence index among identical ones (two identical findings in one
function are told apart by their order, which moving code does not change).
"""
from __future__ import annotations

import ast
import dataclasses
import hashlib
import re
from typing import Iterable, Optional

from ..facts.model import Finding

_LINE_REF = re.compile(r"\blines? \d+(?:/\d+)?")
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def message_key(message: str) -> str:
    """``message`` with line numbers replaced by ``line N``."""
    return _LINE_REF.sub("line N", message)


def enclosing_function(tree: ast.AST, line: int) -> Optional[str]:
    """Dotted qualified name of the innermost function or class around ``line``."""
    names: list[str] = []
    node: ast.AST = tree
    while True:
        inner = None
        for child in ast.iter_child_nodes(node):
            if isinstance(child, _SCOPES):
                start = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                if start <= line <= (child.end_lineno or child.lineno):
                    inner = child
                    break
            elif isinstance(child, (ast.stmt, ast.ExceptHandler, ast.match_case)) \
                    and getattr(child, "lineno", 0) <= line <= (getattr(child, "end_lineno", 0) or 0):
                inner = child          # an if/with/try holding a nested def
                break
        if inner is None:
            return ".".join(names) or None
        if isinstance(inner, _SCOPES):
            names.append(inner.name)
        node = inner


def with_functions(findings: Iterable[Finding], tree: Optional[ast.AST]) -> list[Finding]:
    """``findings`` with ``function`` filled in from ``tree`` (when not already known)."""
    out = []
    for f in findings:
        if f.function is None and tree is not None:
            f = dataclasses.replace(f, function=enclosing_function(tree, f.line))
        out.append(f)
    return out


def base_fingerprint(f: Finding, path: Optional[str] = None) -> str:
    """Hash of (root-relative path, code, enclosing function, message without lines)."""
    key = (path if path is not None else f.path).replace("\\", "/")
    text = f"{key}|{f.code}|{f.function or ''}|{message_key(f.message)}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def fingerprints(findings: Iterable[Finding]) -> list[str]:
    """One ``hash:occurrence`` per finding, in the order given (sort by position first)."""
    seen: dict[str, int] = {}
    out = []
    for f in findings:
        base = base_fingerprint(f)
        seen[base] = seen.get(base, 0) + 1
        out.append(f"{base}:{seen[base]}")
    return out
