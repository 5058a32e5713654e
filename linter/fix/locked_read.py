"""A read-modify-write without a row lock (TXN101, 102, 106, 109): the read locks the row,
inside the transaction that holds the write.  Always **unsafe**: it changes locking (other
writers of the row now wait, and two such paths can deadlock) and, for TXN101, moves the read.

Django: ``Model.objects.get(...)`` becomes ``Model.objects.select_for_update().get(...)``;
a read already in ``transaction.atomic()`` stays where it is; a read just before the
``with transaction.atomic():`` that holds the write moves to the top of that block; a read
and its write in one block with no transaction are wrapped, together with what lies between,
in ``with transaction.atomic():`` (when the write sits in an ``if`` or a loop of the read's
block, that whole statement is wrapped, if the row is not handed on inside it);
``row, created = Model.objects.get_or_create(...)`` is a read too.  No fix for a read on a
named database (``.using(alias)``: ``atomic()`` opens the default database's transaction)
nor around a ``try`` that catches (a database error caught inside ``atomic()`` breaks the
transaction where the code went on before).  SQLAlchemy: ``session.get(Model, pk)`` gets
``with_for_update=True`` (the session's transaction holds the lock until it commits)."""
from __future__ import annotations

import re
from typing import Optional

import libcst as cst

from ..facts.model import Finding
from .edits import line_edits
from .imports import binding, with_import
from .lock_scope import suspends
from .model import Applicability, Fix
from .shapes import django_manager_root, only_small
from .source import FileSource, Located
from .uses import names_in, uses_of

_READ = re.compile(r"`(?P<obj>\w+)(?:\.\w+)?`(?: read| changed in Python at line \d+ from the value read)"
                   r" at line (?P<line>\d+)")
_ATOMIC = "transaction.atomic"


def read_of(src: FileSource, finding: Finding) -> Optional[tuple[str, Located, cst.Assign, Located]]:
    """(row name, the read, its assignment, the write) of a read-modify-write finding, when the
    read is a plain assignment of the row and the write sits in a function; else None."""
    m = _READ.search(finding.message)
    write = src.at(finding.line)
    if m is None or write is None or write.function is None:
        return None
    loc = src.at(int(m["line"]))
    small = only_small(loc.statement) if loc is not None else None
    if loc is None or not isinstance(small, cst.Assign) or len(small.targets) != 1 \
            or _bound_row(small) != m["obj"]:
        return None
    return m["obj"], loc, small, write


def _bound_row(assign: cst.Assign) -> Optional[str]:
    """The name the read binds the row to: ``row = ...``, or ``row, created =
    Model.objects.get_or_create(...)`` (locked, ``get()`` finds the row and locks it; the
    insert it may make is its own, inside the transaction)."""
    target = assign.targets[0].target
    if isinstance(target, cst.Name):
        return target.value
    value = assign.value
    if isinstance(target, cst.Tuple) and len(target.elements) == 2 \
            and all(isinstance(e.value, cst.Name) for e in target.elements) \
            and isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) \
            and value.func.attr.value == "get_or_create":
        first = target.elements[0].value
        assert isinstance(first, cst.Name)
        return first.value
    return None


def locked_read_fix(src: FileSource, finding: Finding) -> Optional[Fix]:
    found = read_of(src, finding)
    if found is None:
        return None
    obj, read, assign, write = found
    if read.function is not write.function or read.in_loop:
        return None
    root = django_manager_root(assign.value)
    if root is not None:
        # a read on a named database: ``atomic()`` would open the default one's transaction,
        # and the locked read would raise outside its own (the router's choice is unseen too)
        return None if root[1] is not None else _django(src, obj, read, assign, write)
    return _sqlalchemy(src, obj, read, assign)


def _locked_value(value: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """``value`` with ``.select_for_update()`` right after its ``Model.objects`` (or
    ``.using(...)``); None when it already locks."""
    if "select_for_update" in cst.Module([]).code_for_node(value):
        return None

    class _Lock(cst.CSTTransformer):
        def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute):
            if original.attr.value == "objects" and isinstance(original.value, cst.Name):
                return cst.Call(func=cst.Attribute(value=updated, attr=cst.Name("select_for_update")))
            return updated
    return value.visit(_Lock())


def in_atomic(src: FileSource, function: cst.FunctionDef, line: int, end: int) -> bool:
    """Whether ``transaction.atomic()`` (a block or the decorator) holds lines ``line`` to ``end``."""
    if any(_ATOMIC in src.code(d) for d in function.decorators):
        return True
    hit = []

    class _Withs(cst.CSTVisitor):
        def visit_With(self, node: cst.With) -> None:
            if any(_ATOMIC in src.code(item) for item in node.items) \
                    and src.line_of(node) < line and end <= src.end_line_of(node):
                hit.append(node)
    function.body.visit(_Withs())
    return bool(hit)


def _django(src: FileSource, obj: str, read: Located, assign: cst.Assign,
            write: Located) -> Optional[Fix]:
    function = read.function
    assert function is not None
    locked = _locked_value(assign.value)
    if locked is None or function.asynchronous is not None:
        return None
    new_read = read.statement.with_changes(body=[assign.with_changes(value=locked)])
    end = src.end_line_of(write.statement)
    if in_atomic(src, function, src.line_of(read.statement), end):
        tree = src.module.deep_replace(read.statement, new_read)
        how = "lock the row where it is read: `select_for_update()`"
    elif write.block is read.block:
        tree = _wrap(src, read, write.index, new_read)
        how = "read it locked with the write in `with transaction.atomic():`"
    else:
        tree = _move_into(src, obj, read, write, new_read)
        how = "move the read into the transaction that writes it, locked (`select_for_update()`)"
        holding = _holding(src, read, write)
        # a row handed on inside the wrapped statement may reach code that writes it on
        # another connection (a thread, a task): that would wait for the lock held here
        if tree is None and holding is not None \
                and not uses_of(obj, read.block.body[read.index + 1:holding + 1]).bare:
            tree = _wrap(src, read, holding, new_read)
            how = "read it locked, and the statement holding the write, in `with transaction.atomic():`"
    if tree is None:
        return None
    if _ATOMIC in tree.code and binding(src.module, "django.db", "transaction") is None:
        tree = with_import(tree, "django.db", "transaction")
    elif binding(src.module, "django.db", "transaction") is False:
        return None
    return Fix(how + " (other writers of the row wait for it)", Applicability.UNSAFE,
               line_edits(src.text, tree.code))


def _holding(src: FileSource, read: Located, write: Located) -> Optional[int]:
    """The index, in the read's block after the read, of the compound statement (an ``if``,
    a ``with``, a loop) that holds the write; None when the write is not under one.  (One
    that opens its own transaction is not wrapped: the read moves into it, or nothing.)"""
    first, last = src.line_of(write.statement), src.end_line_of(write.statement)
    body = read.block.body
    found = next((i for i in range(read.index + 1, len(body))
                  if src.line_of(body[i]) < first and last <= src.end_line_of(body[i])), None)
    return None if found is None or _ATOMIC in src.code(body[found]) else found


def _catches(nodes) -> bool:
    """Whether ``nodes`` hold a ``try`` with handlers (outside nested functions): inside
    ``atomic()`` a database error it catches leaves the transaction broken, and the queries
    after it fail where they ran before."""
    hit = []

    class _Finder(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            if isinstance(node, (cst.Try, cst.TryStar)) and node.handlers:
                hit.append(node)
            return not hit and not isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda))
    for node in nodes:
        node.visit(_Finder())
    return bool(hit)


def _wrap(src: FileSource, read: Located, last: int, new_read: cst.BaseStatement):
    body = list(read.block.body)
    wrapped = [new_read.with_changes(leading_lines=[]), *body[read.index + 1:last + 1]]
    if suspends(wrapped) or _catches(wrapped):
        return None
    block = cst.parse_statement("with transaction.atomic():\n    pass\n",
                                config=src.module.config_for_parsing)
    assert isinstance(block, cst.With)
    block = block.with_changes(body=block.body.with_changes(body=wrapped),
                               leading_lines=read.statement.leading_lines)
    body[read.index:last + 1] = [block]
    return src.module.deep_replace(read.block, read.block.with_changes(body=body))


def _move_into(src: FileSource, obj: str, read: Located, write: Located, new_read):
    """The read moved to the top of the ``with transaction.atomic():`` after it (in the same
    block) that holds the write; None when anything between uses the row or re-binds a name
    the read uses."""
    body = list(read.block.body)
    target = next((i for i in range(read.index + 1, len(body))
                   if isinstance(body[i], cst.With)
                   and any(_ATOMIC in src.code(item) for item in body[i].items)
                   and src.line_of(body[i]) < src.line_of(write.statement) <= src.end_line_of(body[i])),
                  None)
    if target is None:
        return None
    between = body[read.index + 1:target]
    args = names_in(read.statement) - {obj}
    if uses_of(obj, between).any or any(uses_of(n, between).rebound for n in args):
        return None
    with_stmt = body[target]
    inner = with_stmt.body
    first = new_read.with_changes(leading_lines=[])
    with_stmt = with_stmt.with_changes(body=inner.with_changes(body=[first, *inner.body]))
    body[target] = with_stmt
    del body[read.index]
    return src.module.deep_replace(read.block, read.block.with_changes(body=body))


def _sqlalchemy(src: FileSource, obj: str, read: Located, assign: cst.Assign) -> Optional[Fix]:
    call = assign.value
    if not isinstance(call, cst.Call) or not isinstance(call.func, cst.Attribute) \
            or call.func.attr.value != "get" or any(a.keyword for a in call.args) \
            or len(call.args) != 2 or not isinstance(call.args[0].value, cst.Name):
        return None
    args = list(call.args)
    args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    args.append(cst.Arg(value=cst.Name("True"), keyword=cst.Name("with_for_update"),
                        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                              whitespace_after=cst.SimpleWhitespace(""))))
    new = read.statement.with_changes(body=[assign.with_changes(value=call.with_changes(args=args))])
    tree = src.module.deep_replace(read.statement, new)
    return Fix(f"read `{obj}` locked: `with_for_update=True` (held until the session commits; "
               f"other writers of the row wait for it)", Applicability.UNSAFE,
               line_edits(src.text, tree.code))
