"""How a piece of code uses one name: which of its attributes it reads, sets or calls,
and whether it hands the name itself on.  The fixes ask this to be sure a rewrite cannot
change what the code around it sees."""
from __future__ import annotations

import dataclasses
from typing import Iterable, Optional

import libcst as cst


def attribute_of(node: cst.CSTNode, name: str) -> Optional[str]:
    """``f`` when ``node`` is ``name.f``."""
    if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) \
            and node.value.value == name:
        return node.attr.value
    return None


@dataclasses.dataclass
class Uses:
    reads: set = dataclasses.field(default_factory=set)      # ``name.f`` read
    sets: set = dataclasses.field(default_factory=set)       # ``name.f = ...``, ``del name.f``
    calls: set = dataclasses.field(default_factory=set)      # ``name.m(...)``
    bare: bool = False                                       # ``name`` itself read or handed on
    rebound: bool = False                                    # ``name = ...``

    @property
    def any(self) -> bool:
        return bool(self.reads or self.sets or self.calls or self.bare or self.rebound)

    def merge(self, other: "Uses") -> "Uses":
        return Uses(self.reads | other.reads, self.sets | other.sets, self.calls | other.calls,
                    self.bare or other.bare, self.rebound or other.rebound)


class _Collector(cst.CSTVisitor):
    def __init__(self, name: str) -> None:
        self.name = name
        self.uses = Uses()
        self._targets: set[int] = set()
        self._funcs: set[int] = set()
        self._seen: set[int] = set()

    def _target(self, node: cst.CSTNode) -> None:
        self._targets.add(id(node))
        if isinstance(node, (cst.Tuple, cst.List)):
            for el in node.elements:
                self._target(el.value)
        elif isinstance(node, cst.StarredElement):
            self._target(node.value)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._target(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        field = attribute_of(node.target, self.name)
        if field is not None and self.counts(node.target):   # ``x.f += 1`` reads and sets f
            self.uses.reads.add(field)
        self._target(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._target(node.target)

    def visit_Del(self, node: cst.Del) -> None:
        self._target(node.target)

    def visit_For(self, node: cst.For) -> None:
        self._target(node.target)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self._target(node.asname.name)

    def visit_Call(self, node: cst.Call) -> None:
        self._funcs.add(id(node.func))

    def counts(self, node: cst.CSTNode) -> bool:
        """Whether a use at ``node`` is one asked about (a region: :mod:`.regions`)."""
        return True

    def visit_Attribute(self, node: cst.Attribute) -> Optional[bool]:
        field = attribute_of(node, self.name)
        if field is None:
            return True
        if not self.counts(node):
            return False
        self._seen.add(id(node.value))
        if id(node) in self._targets:
            self.uses.sets.add(field)
        elif id(node) in self._funcs:
            self.uses.calls.add(field)
        else:
            self.uses.reads.add(field)
        return False

    def visit_Name(self, node: cst.Name) -> None:
        if node.value != self.name or id(node) in self._seen or not self.counts(node):
            return
        if id(node) in self._targets:
            self.uses.rebound = True
        else:
            self.uses.bare = True


def uses_of(name: str, nodes: Iterable[cst.CSTNode]) -> Uses:
    """How ``nodes`` use ``name`` (nested functions and classes included: they may run later)."""
    collector = _Collector(name)
    for node in nodes:
        node.visit(collector)
    return collector.uses


def names_in(node: cst.CSTNode) -> set[str]:
    """Every plain name ``node`` mentions."""
    found: set[str] = set()

    class _Names(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:
            found.add(n.value)
    node.visit(_Names())
    return found


def has_call(node: cst.CSTNode) -> bool:
    """Whether evaluating ``node`` may run code (a call, an await, a yield, a lambda)."""
    hit = []

    class _Calls(cst.CSTVisitor):
        def on_visit(self, n: cst.CSTNode) -> bool:
            if isinstance(n, (cst.Call, cst.Await, cst.Yield, cst.Lambda, cst.NamedExpr,
                              cst.Subscript, cst.ListComp, cst.GeneratorExp)):
                hit.append(n)
            return not hit
    node.visit(_Calls())
    return bool(hit)
