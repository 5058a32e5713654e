"""Selections by state that the query's own call does not spell: what a claim needs besides it.

``selection.state_columns`` reads the conditions written in a query's call.  Real renewal
jobs and queue workers often build them elsewhere, and claim a row other than the one they
queried:

* a condition kept in a name: ``q = Q()``, ``q |= Q(recurring__last_attempt__isnull=True)``
  in a loop, then ``Account.objects.filter(q)`` (:func:`note_assign`, :func:`note_aug`,
  :func:`named_state`);
* a queryset assigned on both branches of an ``if`` (a schedule, or the deprecated
  setting): the rows are selected by either branch's state, not the last one the walk saw
  (:func:`snapshot`, :func:`merge`);
* the state of a related row: ``User.objects.filter(plan__recurring__last_attempt__lt=t)``
  selects users by a column of their plan's recurring row, and the job then writes
  ``user.plan.recurring.last_attempt``: that related row (``relation_entity``) was selected
  by its ``last_attempt`` (:func:`joined`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from ..facts.query_selection import states_of
from ..facts.syntax import chain, terminal

if TYPE_CHECKING:
    from .state import FunctionState
    from ..facts.model import Entity

__all__ = ["joined", "merge", "named_state", "note_assign", "note_aug", "snapshot"]

_CONDITION_CALLS = frozenset({"filter", "exclude", "where", "filter_by", "get"})


def note_assign(fa: "FunctionState", targets, value: cst.BaseExpression) -> None:
    """``q = Q(a__isnull=True)``: the columns a condition kept in a name compares."""
    found = states_of(value)
    for t in targets:
        if isinstance(t.target, cst.Name):
            if found is None:
                fa.conditions.pop(t.target.value, None)
            else:
                fa.conditions[t.target.value] = found


def note_aug(fa: "FunctionState", node: cst.AugAssign) -> None:
    """``q |= Q(...)`` / ``q &= Q(...)``: the condition now also compares those columns."""
    if isinstance(node.target, cst.Name) and node.target.value in fa.conditions:
        found = states_of(node.value)
        if found is not None:
            fa.conditions[node.target.value] = fa.conditions[node.target.value] | found


def named_state(fa: "FunctionState", value: cst.BaseExpression) -> frozenset:
    """The columns of conditions kept in names that ``value``'s query passes
    (``filter(q)``)."""
    if not fa.conditions or not isinstance(value, cst.Call):
        return frozenset()
    out: set = set()
    for c in chain(value)[1]:
        if terminal(c) in _CONDITION_CALLS:
            for arg in c.args:
                if arg.keyword is None and isinstance(arg.value, cst.Name):
                    out |= fa.conditions.get(arg.value.value, frozenset())
    return frozenset(out)


def joined(base: "Entity", path: str) -> frozenset:
    """The state a related row ``path`` (``user.plan.recurring``) was selected by, from the
    joined conditions of its base row's query (``plan__recurring__last_attempt__lt``)."""
    prefix = "__".join(path.split(".")[1:]) + "__"
    out = set()
    for column in base.state:
        rest = column[len(prefix):] if column.startswith(prefix) else ""
        if rest and "__" not in rest:
            out.add(rest)
    return frozenset(out)


def snapshot(fa: "FunctionState") -> dict:
    """What each name held of a query before an ``if``'s other branch runs."""
    return dict(fa.querysets)


def merge(fa: "FunctionState", before: dict) -> None:
    """After the ``else`` branch: a query it assigned anew was selected by either branch's
    state, so it keeps the state the first branch gave it too."""
    for name, info in fa.querysets.items():
        old = before.get(name)
        if old is not None and old is not info and old.state - info.state:
            info.state = info.state | old.state
