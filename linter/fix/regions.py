"""Uses of a name inside a range of lines of a function: the regions a fix must check
(between a counter's change and its save, after the save)."""
from __future__ import annotations

from typing import Collection, Optional

import libcst as cst

from .source import FileSource
from .uses import Uses, _Collector


class _LineCollector(_Collector):
    def __init__(self, name: str, src: FileSource, lo: int, hi: Optional[int],
                 skip: Collection[cst.CSTNode]) -> None:
        super().__init__(name)
        self.src = src
        self.lo = lo
        self.hi = hi
        self.skip = {id(s) for s in skip}

    def counts(self, node: cst.CSTNode) -> bool:
        line = self.src.line_of(node)
        return line >= self.lo and (self.hi is None or line < self.hi)

    def on_visit(self, node: cst.CSTNode) -> bool:
        return id(node) not in self.skip and super().on_visit(node)


def uses_between(src: FileSource, function: cst.FunctionDef, name: str, lo: int,
                 hi: Optional[int] = None, skip: Collection[cst.CSTNode] = ()) -> Uses:
    """How the lines ``lo`` up to ``hi`` (None: the end) of ``function``'s body use ``name``,
    the statements in ``skip`` left out."""
    collector = _LineCollector(name, src, lo, hi, skip)
    function.body.visit(collector)
    return collector.uses
