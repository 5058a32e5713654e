"""Where a check stops guarding what follows: its ``if`` ended, or its branches set the field.

Bookkeeping the walk does on the checks it recorded (:class:`~..facts.model.Check`) as it
leaves an ``if`` or ``except``; the check-then-act rule (``rules/check_then_act.py``) reads
the result (``used``, ``closed``, ``carried``) when an act comes.
"""
from __future__ import annotations

import libcst as cst

from ..facts.model import Check, CheckKind
from ..facts.syntax import assigned_names, walk_nodes


def normalises(check: Check, blocks: list) -> bool:
    """A limit check whose branches set the very field it compared (``if self.state >=
    DONE and not text: self.state = EMPTY``) computes that field's new value: a
    read-modify-write of the field, judged as one by ``read_modify_write``, not the guard
    of a later act."""
    if check.kind is not CheckKind.LIMIT or check.subject is None or check.column is None:
        return False
    name = check.subject.name
    for block in blocks:
        for node in walk_nodes(block):
            if isinstance(node, (cst.AssignTarget, cst.AugAssign)):
                target = node.target
                if isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name) and \
                        target.value.value == name and target.attr.value == check.column:
                    return True
    return False


def close(checks: list[Check], blocks: list) -> None:
    """The ``if`` (or ``except``) that made ``checks`` ended and every way out of it goes on:
    from now on an act depends on them only through the names their branches set."""
    carried = frozenset().union(*(assigned_names(b) for b in blocks))
    for check in checks:
        check.closed = True
        check.carried = carried
