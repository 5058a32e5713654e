"""A ``select_for_update()`` read outside any transaction (TXN108): wrap it, and the rest of
its block, in ``with transaction.atomic():``.

Why this keeps behaviour except the race: in autocommit Django raises
``TransactionManagementError`` when such a queryset is evaluated, so no run of the code got
past the read without a caller's transaction; under one, ``atomic()`` only adds a
savepoint.  The block runs to its end inside the transaction, so the writes that follow the
read hold the row lock.  Not offered for a generator or an ``async`` function (the
transaction would stay open across a ``yield`` or an ``await``), nor for a read the rule
judged to take the lock for its callers (low confidence): the transaction is theirs."""
from __future__ import annotations

from typing import Optional

import libcst as cst

from ..facts.model import Confidence, Finding
from .edits import line_edits
from .imports import binding, with_import
from .model import Applicability, Fix, no_fix
from .source import FileSource


def suspends(nodes) -> bool:
    """Whether ``nodes`` hold a ``yield`` or an ``await`` (outside nested functions)."""
    hit = []

    class _Finder(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            if isinstance(node, (cst.Yield, cst.Await)):
                hit.append(node)
            return not hit and not isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda))
    for node in nodes:
        node.visit(_Finder())
    return bool(hit)


def lock_scope_fix(src: FileSource, finding: Finding) -> Optional[Fix]:
    loc = src.at(finding.line)
    if loc is None or loc.function is None:
        return None
    if finding.confidence < Confidence.MEDIUM:
        return no_fix("the lock is taken for the callers: their transaction must hold it")
    function = loc.function
    wrapped = list(loc.block.body[loc.index:])
    if function.asynchronous is not None or suspends([function.body]):
        return no_fix("an async function or a generator: a transaction must not stay open "
                      "across an await or a yield")
    found = binding(src.module, "django.db", "transaction")
    if found is False:
        return None
    first = wrapped[0]
    body = [first.with_changes(leading_lines=[]), *wrapped[1:]]
    block = cst.parse_statement("with transaction.atomic():\n    pass\n",
                                config=src.module.config_for_parsing)
    assert isinstance(block, cst.With)
    inner = block.body.with_changes(body=body)
    block = block.with_changes(body=inner, leading_lines=first.leading_lines)
    new_block = loc.block.with_changes(body=[*loc.block.body[:loc.index], block])
    tree = src.module.deep_replace(loc.block, new_block)
    if found is None:
        tree = with_import(tree, "django.db", "transaction")
    return Fix("hold the row lock: wrap the read and the rest of its block in "
               "`with transaction.atomic():`", Applicability.SAFE,
               line_edits(src.text, tree.code))
