"""TXN105, the get-or-create contract: the row found or made is returned, and a racing call
gets an ``IntegrityError`` instead.

A unique key turns a racing insert into an ``IntegrityError`` (``check_then_act.unique_key_settles``),
which is no duplicate; but a function named for the contract (``get_or_create_project``) that
returns the row it found or the row it made promises its caller a row, and the racing call
gets the exception instead (Django's ``get_or_create()`` catches it and reads the row again
for this reason).  Such an insert, unguarded, is reported at ``MEDIUM`` confidence.  Its
severity stays the check's: on the judged projects two of three were not worth fixing, but
the third was a real duplicate the key could not stop (a composite key over columns the
insert leaves NULL, which PostgreSQL never finds equal), and low severity would hide it.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Optional

import libcst as cst

from ..facts.model import Act, Check, CheckKind, Confidence
from ..facts.syntax import iter_calls, kids, names_in, walk_nodes
from ..flow.events import FunctionEnded
from ..flow.records import SettledInsert
from . import severity

if TYPE_CHECKING:
    from ..flow.state import FunctionState

#: a function named for the contract: ``get_or_create_project``, ``find_or_create_kek``
_GET_OR_CREATE = re.compile(r"(?:get|find|fetch|load|lookup)\w*_or_(?:create|add|insert|make|new)")


def note_settled(fa: "FunctionState", check: Check, act: Act, node: cst.CSTNode) -> None:
    """An insert a unique key settles: kept for :func:`on_function_end`, which reports it when the
    function hands the row on as the one it found or made.

    Only a function named for the contract (``get_or_create_*``, ``find_or_create_*``) makes
    the promise: on the judged corpus, plain getters that insert a missing row under a unique
    key (``get_tag(name)``) were judged safe, the caller taking the error as any other."""
    if check.kind is CheckKind.NONE and not fa.integrity_depth and not check.locked and \
            fa.outer is None and _GET_OR_CREATE.search(fa.name.lower()):
        fa.helper_checks.settled.append(SettledInsert(check, act, node))


def on_function_end(fa: "FunctionState", event: FunctionEnded) -> None:
    """Report the get-or-create inserts that return the row (subscribed to ``FUNCTION_END``)."""
    if not fa.helper_checks.settled:
        return
    returns = _returned_names(fa)
    for settled in fa.helper_checks.settled:
        check, act, node = settled.check, settled.act, settled.node
        row = (check.keys or set()) & (act.names | _bound_to(fa.node, node))
        if not any(line > act.line and names & row for line, names in returns):
            continue
        fw = fa.framework_hint()
        fa.report(node, "TXN105", get_or_create_message(check, act, fw), confidence=Confidence.MEDIUM,
                  assessment=severity.of_check(check, act))
    fa.helper_checks.settled = []


def _returned_names(fa: "FunctionState") -> list[tuple[int, set]]:
    out = []
    stack = list(fa.node.body.body) if hasattr(fa.node.body, "body") else []
    while stack:
        n = stack.pop()
        if isinstance(n, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        if isinstance(n, cst.Return) and n.value is not None:
            out.append((fa.line(n), names_in(n.value)))
        stack.extend(kids(n))
    return out


def _bound_to(fn: cst.FunctionDef, node: cst.CSTNode) -> set:
    """Names an assignment binds to the value of ``node`` (``x = M.objects.create(..)``)."""
    for n in walk_nodes(fn):
        if isinstance(n, cst.Assign) and any(c is node for c in iter_calls(n.value)):
            return set().union(*(names_in(t.target) for t in n.targets))
    return set()


def get_or_create_message(check: Check, act: Act, framework: Optional[str]) -> str:
    fix = "use get_or_create(), which does this" if framework == "django" else \
        "or INSERT ... ON CONFLICT DO NOTHING and read the row"
    return (f"TXN105 check-then-act: {check.what} checked at line {check.line}, then {act.what} at "
            f"line {act.line}, and the row found or made is returned: a unique key stops the "
            f"duplicate, but a racing call's insert fails with IntegrityError instead of returning "
            f"the row; catch IntegrityError around the insert and read the row again, {fix}")
