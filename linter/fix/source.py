"""One file as the fixes see it: its exact text (line endings kept), a digest of its bytes,
its libcst tree with positions, and where each statement sits (block, index, function)."""
from __future__ import annotations

import dataclasses
import hashlib
import io
import tokenize
from typing import Optional, Union

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

#: a statement list a statement sits in: a module or an indented block
Block = Union[cst.Module, cst.IndentedBlock]


def digest(data: bytes) -> str:
    """What "the file has not changed since it was linted" compares."""
    return hashlib.sha256(data).hexdigest()


@dataclasses.dataclass(frozen=True)
class Located:
    """A statement, the block holding it and its index there, and the enclosing functions
    and loops (innermost last)."""

    statement: cst.BaseStatement
    block: Block
    index: int
    functions: tuple[cst.FunctionDef, ...]
    in_loop: bool
    classes: tuple[cst.ClassDef, ...] = ()

    @property
    def function(self) -> Optional[cst.FunctionDef]:
        return self.functions[-1] if self.functions else None

    def guarding_if(self) -> Optional[cst.If]:
        """The ``if`` whose body is this statement's block, found in its function (the
        check an exists-then-create's insert sits under)."""
        found: list[cst.If] = []
        block = self.block

        class _Ifs(cst.CSTVisitor):
            def visit_If(self, node: cst.If) -> None:
                if node.body is block:
                    found.append(node)
        if self.function is not None:
            self.function.visit(_Ifs())
        return found[0] if found else None


class _StatementIndex(cst.CSTVisitor):
    """Every statement by its first line, with its block, functions and loops."""

    def __init__(self, positions) -> None:
        self.positions = positions
        self.by_line: dict[int, Located] = {}
        self._functions: list[cst.FunctionDef] = []
        self._classes: list[cst.ClassDef] = []
        self._loops: list[int] = [0]

    def _record(self, block: Block) -> None:
        for i, stmt in enumerate(block.body):
            line = self.positions[stmt].start.line
            self.by_line.setdefault(line, Located(stmt, block, i, tuple(self._functions),
                                                  self._loops[-1] > 0, tuple(self._classes)))

    def visit_Module(self, node: cst.Module) -> None:
        self._record(node)

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self._record(node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._functions.append(node)
        self._loops.append(0)

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._functions.pop()
        self._loops.pop()

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._classes.append(node)

    def leave_ClassDef(self, node: cst.ClassDef) -> None:
        self._classes.pop()

    def visit_For(self, node: cst.For) -> None:
        self._loops[-1] += 1

    def leave_For(self, node: cst.For) -> None:
        self._loops[-1] -= 1

    def visit_While(self, node: cst.While) -> None:
        self._loops[-1] += 1

    def leave_While(self, node: cst.While) -> None:
        self._loops[-1] -= 1


class FileSource:
    """A file's bytes, text and tree.  Raises ``ValueError`` when it cannot be decoded
    or parsed (no fix is offered then)."""

    def __init__(self, path: str, data: bytes) -> None:
        self.path = path
        self.data = data
        self.digest = digest(data)
        self.encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        self.text = data.decode(self.encoding)
        try:
            self.module = cst.parse_module(data)
        except cst.ParserSyntaxError as exc:
            raise ValueError(f"cannot parse: {exc.message}") from None
        self.wrapper = MetadataWrapper(self.module, unsafe_skip_copy=True)
        self.positions = self.wrapper.resolve(PositionProvider)
        index = _StatementIndex(self.positions)
        self.wrapper.visit(index)
        self.statements = index.by_line

    @classmethod
    def read(cls, path: str) -> "FileSource":
        with open(path, "rb") as fh:
            return cls(path, fh.read())

    def at(self, line: int) -> Optional[Located]:
        return self.statements.get(line)

    def line_of(self, node: cst.CSTNode) -> int:
        return self.positions[node].start.line

    def end_line_of(self, node: cst.CSTNode) -> int:
        return self.positions[node].end.line

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    def encode(self, text: str) -> bytes:
        return text.encode(self.encoding)
