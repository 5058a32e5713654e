"""What a class's methods say about ``self``: which fields each reads (to a fixed point),
and which hand out a model's manager.

Which of the row's own fields each method of a class reads, to a fixed point.

``self.expire = self.get_extended_until(plan)`` looks like a value from arguments, but
``get_extended_until`` computes from ``self.expire``: the new value derives from the old
one, and two concurrent extensions lose one.  The walk sees one method; this summary,
made once per class from the module's ``ast``, says what a call of a sibling method on
``self`` reads: its own ``self.x`` loads and, transitively, those of the sibling methods
it calls (``self.other()``).  A name that is itself a method is never a field.
"""
from __future__ import annotations

import ast
from typing import Optional


class SelfReads:
    """Per class of one module: method name -> the fields of ``self`` it reads; and the
    methods that return a model's manager or queryset (``def get_connection(self): return
    OrmQ.objects.using(db)``), so ``self.get_connection().filter(..)`` is that model's rows."""

    def __init__(self, tree: Optional[ast.AST]):
        self.tree = tree
        self._classes: dict[str, dict[str, frozenset]] = {}
        self._managers: dict[str, dict[str, str]] = {}

    def manager_model(self, cls: str, method: str) -> Optional[str]:
        found = self._managers.get(cls)
        if found is None:
            found = self._managers[cls] = _managers(_class_node(self.tree, cls))
        return found.get(method)

    def of_class(self, cls: str) -> dict[str, frozenset]:
        summary = self._classes.get(cls)
        if summary is None:
            summary = self._classes[cls] = _summarise(_class_node(self.tree, cls))
        return summary

    def expand(self, cls: str, reads: set) -> set:
        """``reads`` (attributes of ``self`` an expression uses) with each method replaced by
        the fields it reads."""
        summary = self.of_class(cls)
        out: set = set()
        for attr in reads:
            if attr in summary:
                out |= summary[attr]
            else:
                out.add(attr)
        return out


def _class_node(tree: Optional[ast.AST], cls: str) -> Optional[ast.ClassDef]:
    for node in getattr(tree, "body", []):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return node
    return None


def _summarise(node: Optional[ast.ClassDef]) -> dict[str, frozenset]:
    if node is None:
        return {}
    loads: dict[str, set] = {}
    for f in node.body:
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
            loads[f.name] = {n.attr for n in ast.walk(f) if isinstance(n, ast.Attribute) and
                             isinstance(n.value, ast.Name) and n.value.id == "self" and
                             isinstance(n.ctx, ast.Load)}
    changed = True
    while changed:                       # methods calling methods, to a fixed point
        changed = False
        for name, got in loads.items():
            for attr in [a for a in got if a in loads and a != name]:
                if not loads[attr] <= got:
                    got |= loads[attr]
                    changed = True
    return {name: frozenset(a for a in got if a not in loads) for name, got in loads.items()}


_MANAGER_ATTRS = ("objects", "_default_manager", "_base_manager")


def _managers(node: Optional[ast.ClassDef]) -> dict[str, str]:
    """Method -> model, for methods that return ``Model.objects...``."""
    out: dict[str, str] = {}
    for f in getattr(node, "body", []):
        if not isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for ret in ast.walk(f):
            if isinstance(ret, ast.Return) and ret.value is not None:
                value = ret.value
                while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
                    value = value.func.value
                while isinstance(value, ast.Attribute) and value.attr not in _MANAGER_ATTRS:
                    value = value.value
                if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and \
                        value.value.id[:1].isupper():
                    out[f.name] = value.value.id
                    break
    return out
