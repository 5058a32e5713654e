"""Expressions reduced to shapes: what session resolution (:mod:`.sessions`) needs of them.

A shape is a small tuple (a name, an attribute of a shape, a call, a subscript, a union
or an annotation), made from ``ast`` (module facts) or libcst (the walk) alike, so both
stages resolve a name the same way.  Also the names a libcst function binds, which the
walk needs to tell a local from a module-level name.
"""
from __future__ import annotations

import ast
import dataclasses
from typing import Iterator, Optional

import libcst as cst

#: an expression reduced to what resolution needs (see ``shape_of_ast``):
#: ("name", id) | ("attr", base, name) | ("call", func, args, kwargs) | ("sub", base)
#: | ("union", parts) | ("ann", shape) (an annotation) | None (anything else)
Shape = Optional[tuple]


# ---------------------------------------------------------------- shapes

def shape_of_ast(node: Optional[ast.AST], annotation: bool = False) -> Shape:
    """``node`` (an ``ast`` expression) as a Shape; awaits are looked through.

    A string is read as code only in an ``annotation`` (``x: "Stack"``), never elsewhere
    (a module's string constants are data).  Whatever cannot be shaped (a too deeply nested
    expression) is None, unknown."""
    try:
        return _shape_ast(node, annotation)
    except (RecursionError, MemoryError):
        return None


def _shape_ast(node: Optional[ast.AST], annotation: bool) -> Shape:
    if node is None:
        return None
    if isinstance(node, ast.Await):
        return _shape_ast(node.value, annotation)
    if isinstance(node, ast.Name):
        return ("name", node.id)
    if isinstance(node, ast.Attribute):
        return ("attr", _shape_ast(node.value, annotation), node.attr)
    if isinstance(node, ast.Call):
        return ("call", _shape_ast(node.func, annotation),
                tuple(_shape_ast(a, annotation) for a in node.args),
                tuple((k.arg, _shape_ast(k.value, annotation)) for k in node.keywords if k.arg))
    if isinstance(node, ast.Subscript):
        return ("sub", _shape_ast(node.value, annotation), _shape_ast(node.slice, annotation))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return ("union", (_shape_ast(node.left, annotation), _shape_ast(node.right, annotation)))
    if annotation and isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _shape_of_string(node.value)
    return None


#: a string annotation longer than this is not read (real ones are short)
_MAX_ANNOTATION = 200


def _shape_of_string(text: str) -> Shape:
    """A string annotation (``"Stack"``, ``"Optional[sessionmaker]"``) as a Shape."""
    if len(text) > _MAX_ANNOTATION:
        return None
    try:
        return _shape_ast(ast.parse(text.strip(), mode="eval").body, True)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def shape_of_cst(node: Optional[cst.CSTNode], annotation: bool = False) -> Shape:
    """``node`` (a libcst expression) as a Shape, like ``shape_of_ast``."""
    try:
        return _shape_cst(node, annotation)
    except (RecursionError, MemoryError):
        return None


def _shape_cst(node: Optional[cst.CSTNode], annotation: bool) -> Shape:
    if node is None:
        return None
    if isinstance(node, cst.Await):
        return _shape_cst(node.expression, annotation)
    if isinstance(node, cst.Name):
        return ("name", node.value)
    if isinstance(node, cst.Attribute):
        return ("attr", _shape_cst(node.value, annotation), node.attr.value)
    if isinstance(node, cst.Call):
        args = tuple(_shape_cst(a.value, annotation) for a in node.args
                     if a.keyword is None and not a.star)
        kwargs = tuple((a.keyword.value, _shape_cst(a.value, annotation)) for a in node.args
                       if a.keyword is not None)
        return ("call", _shape_cst(node.func, annotation), args, kwargs)
    if isinstance(node, cst.Subscript):
        first = node.slice[0].slice if node.slice else None
        return ("sub", _shape_cst(node.value, annotation),
                _shape_cst(first.value, annotation) if isinstance(first, cst.Index) else None)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.BitOr):
        return ("union", (_shape_cst(node.left, annotation), _shape_cst(node.right, annotation)))
    if annotation and isinstance(node, cst.SimpleString):
        try:
            text = node.evaluated_value
        except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError):
            return None
        return _shape_of_string(text) if isinstance(text, str) else None
    return None


#: Fields of a libcst node that never hold a binding: whitespace, brackets, separators.
_NO_BINDINGS = ("whitespace", "leading_lines", "lines_after", "trailing_whitespace", "lpar", "rpar", "comma",
                "semicolon", "equal", "colon", "header", "footer", "dot", "newline")
_child_fields: dict[type, tuple[str, ...]] = {}


def _child_nodes(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The child nodes of ``node`` that may hold a binding.

    Not ``node.children``: libcst computes it with a visitor over every field, whitespace
    included, which made finding a function's local names most of a lint run."""
    names = _child_fields.get(type(node))
    if names is None:
        names = _child_fields[type(node)] = tuple(
            f.name for f in dataclasses.fields(node) if not f.name.startswith(_NO_BINDINGS))
    for name in names:
        value = getattr(node, name)
        if isinstance(value, cst.CSTNode):
            yield value
        elif isinstance(value, (list, tuple)):
            for item in value:
                if isinstance(item, cst.CSTNode):
                    yield item


def cst_local_names(node: cst.FunctionDef) -> set[str]:
    """The names function ``node`` binds in its own scope (libcst): assignments of every
    kind, for / with / except / match targets, the walrus, comprehension variables,
    ``del``, imports, nested defs and classes; names declared global / nonlocal are left
    out.  The analysis takes them as locals of unknown type until it sees their value, so
    none falls back to the module-level name of the same spelling."""
    bound: set[str] = set()
    declared: set[str] = set()

    def targets(t: Optional[cst.CSTNode]) -> None:
        if isinstance(t, cst.Name):
            bound.add(t.value)
        elif isinstance(t, (cst.Tuple, cst.List)):
            for e in t.elements:
                targets(e.value)
        elif isinstance(t, cst.StarredElement):
            targets(t.value)
        elif isinstance(t, cst.AsName):
            targets(t.name)

    stack: list = list(node.body.children) if isinstance(node.body, cst.CSTNode) else []
    while stack:
        n = stack.pop()
        if isinstance(n, (cst.FunctionDef, cst.ClassDef)):
            bound.add(n.name.value)
            stack.extend(d.decorator for d in n.decorators)
            continue
        if isinstance(n, cst.Lambda):
            continue
        if isinstance(n, (cst.Global, cst.Nonlocal)):
            declared.update(item.name.value for item in n.names)
            continue
        if isinstance(n, cst.AssignTarget):
            targets(n.target)
        elif isinstance(n, (cst.AnnAssign, cst.AugAssign, cst.For, cst.NamedExpr, cst.CompFor,
                            cst.Del)):
            targets(n.target)
        elif isinstance(n, cst.WithItem):
            targets(n.asname)
        elif isinstance(n, cst.ExceptHandler):
            targets(n.name)
        elif isinstance(n, (cst.Import, cst.ImportFrom)) and not isinstance(n.names, cst.ImportStar):
            for a in n.names:
                if a.asname is not None:
                    targets(a.asname)
                else:
                    name = a.name
                    while isinstance(name, cst.Attribute):
                        name = name.value
                    targets(name)
        elif isinstance(n, (cst.MatchAs, cst.MatchStar)):
            targets(n.name)
        elif isinstance(n, cst.MatchMapping):
            targets(n.rest)
        stack.extend(_child_nodes(n))
    return bound - declared


# ---------------------------------------------------------------- facts of one module
