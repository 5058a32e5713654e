"""TXN105, compare-and-set: a row selected by its state, then that state written back.

A queue worker reads the tasks whose ``lock`` has expired and sets ``lock`` on each; a
renewal job reads the accounts not yet attempted and records the attempt; a view reads the
order while it is ``pending`` and marks it ``paid``.  The compare (the query's condition, or
an ``if`` on the row's field) and the set (the save) are two statements: two workers that
both read before either writes both pass the compare, both claim the row, and both do the
work the claim was meant to make single (run the task, charge the card, send the mail).

The walk records, on each entity, the columns its read selected by state
(:mod:`..selection`: compared with a constant or a range, not the row's own key) and the
fields an ``if`` compared before the write.  :func:`claimed` decides whether a write sets
one of them back with nothing making the pair one step, and :func:`matters` whether a
double claim does harm:

* a row lock (``select_for_update()``, ``with_for_update()``; ``skip_locked`` is the usual
  cure for queues), a lock or a serializable transaction held from the read to the write,
  or a version column (optimistic locking) settle it;
* a plain transaction does not: at READ COMMITTED both workers read the old state, and the
  second UPDATE waits for the first and then overwrites it;
* the fix that needs no lock is a conditional update: ``filter(pk=t.pk, lock=t.lock)
  .update(lock=now)`` and act only when it changed a row (that is not an entity write,
  so the walk never sees a claim there).

Only a claim that matters is reported: the value written is the claimant's own (a time, an
id, any non-constant), or the function does other work after the compare (another write,
an insert): two workers setting the same constant and doing nothing else lose nothing.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from ..model import Entity, Mutation


@dataclasses.dataclass(frozen=True)
class Claim:
    """A write that sets back a column its row was selected by."""

    entity: Entity
    columns: tuple[str, ...]
    #: the mutations the write carries (the claimed columns and whatever is set with them)
    written: tuple[Mutation, ...]
    #: where the compare was: the read's query (None) or an ``if`` at this line
    checked_line: Optional[int]


def claimed(ent: Entity, written: list[Mutation], stack: tuple) -> Optional[Claim]:
    """The claim ``ent``'s write of ``written`` (under the scopes ``stack``) makes, if
    nothing settles it."""
    selected = ent.state | frozenset(ent.state_checks)
    if not selected or ent.source not in ("get", "loop", "call", "self"):
        return None
    hit = [m for m in written if m.attr in selected and m.kind != "atomic"]
    if not hit or settled(ent, stack):
        return None
    columns = tuple(dict.fromkeys(m.attr for m in hit))
    checks = [ent.state_checks[c] for c in columns if c in ent.state_checks and c not in ent.state]
    return Claim(ent, columns, tuple(written), min(checks) if checks else None)


def matters(claim: Claim, other_work: bool) -> bool:
    """Whether a double claim does harm: a value written with it is the claimant's own (a
    time, an id, any non-constant), or ``other_work``, the function writes or inserts something else
    after the read, which both claimants would do."""
    return other_work or not all(m.constant for m in claim.written)


def settled(ent: Entity, stack: tuple) -> bool:
    """A row lock, a version column, or a lock or serializable transaction held from the
    read to the write makes the compare and the set one step."""
    if ent.for_update or ent.locked_read or ent.versioned:
        return True
    held = {id(s) for s in stack}
    for scope in ent.scopes:
        if id(scope) in held and (scope.kind == "lock" or scope.serializable):
            return True
    return False


def message(claim: Claim, write_line: int, verb: str, framework: Optional[str]) -> str:
    ent = claim.entity
    cols = ", ".join(f"`{c}`" for c in claim.columns)
    if claim.checked_line is not None:
        compare = f"{cols} of `{ent.name}` checked at line {claim.checked_line}"
    else:
        compare = f"`{ent.name}` selected at line {ent.read_line} by its {cols}"
    fix = {"sqlalchemy": "read it with with_for_update(skip_locked=True), or make the write a "
                         "conditional UPDATE ... WHERE the old value and act only if it changed a row",
           }.get(framework, "read it with select_for_update(skip_locked=True) inside "
                            "transaction.atomic(), or claim it with filter(pk=..., <old value>)"
                            ".update(...) and act only if it returned 1")
    return (f"TXN105 check-then-act: {compare}, then {cols} set and {verb} at line {write_line}: "
            f"two workers can both pass the compare and both claim the row; {fix}")
