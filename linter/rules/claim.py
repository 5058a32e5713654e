"""TXN105, compare-and-set: a row selected by its state, then that state written back.

A queue worker reads the tasks whose ``lock`` has expired and sets ``lock`` on each; a
renewal job reads the accounts not yet attempted and records the attempt; a view reads the
order while it is ``pending`` and marks it ``paid``.  The compare (the query's condition)
and the set (the save) are two statements: two workers that both read before either
writes both pass the compare, both claim the row, and both do the work the claim was
meant to make single (run the task, charge the card, send the mail).

The walk records, on each entity, the columns its read selected by state
(:mod:`..selection`: compared with a constant or a range, not the row's own key).
:func:`claimed` decides whether a write sets one of them back with nothing making the
pair one step, and :func:`matters` whether a double claim does harm:

* a row lock (``select_for_update()``, ``with_for_update()``; ``skip_locked`` is the usual
  cure for queues), a lock or a serializable transaction held from the read to the write,
  or a version column (optimistic locking) settle it;
* a plain transaction does not: at READ COMMITTED both workers read the old state, and the
  second UPDATE waits for the first and then overwrites it;
* the fix that needs no lock is a conditional update: ``filter(pk=t.pk, lock=t.lock)
  .update(lock=now)`` and act only when it changed a row (that is not an entity write,
  so the walk never sees a claim there).

Only a claim that matters is reported: the function does work with the row besides
writing it after the claim (another write or insert, the row returned, yielded or passed to a
call that is not logging), which both claimants would do.  A sweep that only stamps rows loses nothing
when it runs twice.  An update of selected rows (``filter(id__in=ids).update(..)``) is judged
the same way, with one more way to matter: a claimed column set to something that differs
between claimants (``owner=me``, ``lock=now``) assigns the rows, and the owner's work may
follow anywhere.  A column set to a constant every claimant writes alike (``is_active=False``,
``Status.CANCELLED``), with no work after it, is an idempotent sweep; further updates of the
same selection (archiving the rows' children too) are no work of their own.

An ``if`` on a field of a row read by its key, then a write of that field, is *not* taken
for a claim: on real projects it is mostly normalisation (``if self.state == X:
self.state = Y``) and lazy initialisation, rarely a race.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from ..facts.model import Confidence, Entity, Mutation
from ..facts.query_selection import Selection
from ..facts.syntax import label
from ..flow.events import FunctionEnded, SelectedRowsUpdated, Stored
from ..flow.records import Claim, PendingClaim, PendingUpdateClaim
from . import severity

if TYPE_CHECKING:
    from ..flow.state import FunctionState


def claimed(ent: Entity, written: list[Mutation], stack: tuple) -> Optional[Claim]:
    """The claim ``ent``'s write of ``written`` (under the scopes ``stack``) makes, if
    nothing settles it."""
    if not ent.state or ent.source not in ("get", "loop", "call"):
        return None
    hit = [m for m in written if m.attr in ent.state and m.kind != "atomic"]
    if not hit or settled(ent, stack):
        return None
    return Claim(ent, tuple(dict.fromkeys(m.attr for m in hit)), tuple(written))


def matters(claim: Claim, other_work: bool) -> bool:
    """Whether a double claim does harm: ``other_work``, the function writes or inserts
    something else after the read, or hands the row on (returns it, passes it to a call that
    is not logging): both claimants would do that work.  A claim that only writes the row
    (a sweep setting a timestamp) loses nothing when it runs twice."""
    return other_work


def claimed_by_update(selection: Selection, set_cols: frozenset, own_state: frozenset) -> tuple[str, ...]:
    """The columns an update of the selected rows (``filter(id__in=ids).update(owner=me)``)
    sets back without re-checking them in its own condition: a claim in two statements."""
    if selection.for_update:
        return ()
    return tuple(sorted((selection.columns & set_cols) - own_state))


def update_message(selection: Selection, columns: tuple[str, ...], line: int, what: str,
                   framework: Optional[str]) -> str:
    cols = ", ".join(f"`{c}`" for c in columns)
    fix = ("select them with with_for_update(skip_locked=True) in the same transaction, or repeat "
           "the condition in the UPDATE's WHERE" if framework == "sqlalchemy" else
           "select them with select_for_update(skip_locked=True) inside transaction.atomic(), or "
           "repeat the condition in the update's filter()")
    return (f"TXN105 check-then-act: rows selected at line {selection.line} by their {cols} "
            f"(`{selection.name}`), then {cols} set by {what} at line {line} without checking "
            f"them again: two workers can both select and both claim the same rows; {fix}")


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
    compare = f"`{ent.name}` selected at line {ent.read_line} by its {cols}"
    fix = {"sqlalchemy": "read it with with_for_update(skip_locked=True), or make the write a "
                         "conditional UPDATE ... WHERE the old value and act only if it changed a row",
           }.get(framework, "read it with select_for_update(skip_locked=True) inside "
                            "transaction.atomic(), or claim it with filter(pk=..., <old value>)"
                            ".update(...) and act only if it returned 1")
    return (f"TXN105 check-then-act: {compare}, then {cols} set and {verb} at line {write_line}: "
            f"two workers can both pass the compare and both claim the row; {fix}")


def on_store(fa: "FunctionState", event: Stored) -> None:
    """Any write of a row: kept as a pending claim when it sets back what the row was
    selected by (subscribed to ``STORE``); judged at the function's end."""
    found = claimed(event.entity, list(event.written), event.scopes)
    if found is not None:
        fa.claims.append(PendingClaim(found, event.line, event.verb))


def on_selected_rows_updated(fa: "FunctionState", event: SelectedRowsUpdated) -> None:
    """``filter(id__in=ids).update(owner=me)`` of ids selected by state: the first selection
    whose state the update sets back without re-checking it (subscribed to
    ``SELECTED_ROWS_UPDATED``)."""
    call = event.node
    for sel in event.selections:
        columns = claimed_by_update(sel, event.set_columns, event.compared)
        if columns and not any(s.kind == "lock" or s.serializable for s in event.scopes):
            fa.work_lines.append(event.line)
            fa.update_claims.append(PendingUpdateClaim(
                call, event.line, fa.last_line(call), sel.name, sel.line, set(columns) <= event.literal,
                update_message(sel, columns, event.line, f"`{label(call.func)}()`", fa.framework_hint()),
                severity.of_claim(None, columns)))
            return


def on_function_end(fa: "FunctionState", event: FunctionEnded) -> None:
    """TXN105 for the compare-and-set writes that matter, now that every write of the
    function is known (subscribed to ``FUNCTION_END``)."""
    for pending in fa.claims:
        found, w_line = pending.claim, pending.line
        ent = found.entity
        other_work = any(n > w_line for n in fa.work_lines) or \
            any(n > w_line and name in (ent.name, ent.name.split(".")[0], fa.loop_of.get(ent.name))
                for n, name in fa.handed_on)      # ``user`` of ``user.plan.recurring`` too
        if not matters(found, other_work) or w_line in fa.sure_write_lines:
            continue
        fw = found.entity.framework or fa.framework_hint()
        fa.drop_stale_copy(w_line)
        fa.report(w_line, "TXN105", message(found, w_line, pending.verb, fw), deferrable=True,
                  confidence=Confidence.MEDIUM, assessment=severity.of_claim(ent, found.columns))
    fa.claims = []
    # the updates' own lines: other claims' updates (the same rows' children archived too) are
    # no work of their own (they set the same values again when run twice)
    claim_lines = {n for p in fa.update_claims for n in range(p.line, p.last_line + 1)}
    for update in fa.update_claims:
        rows = {update.selection} | {n for n, s in fa.selections.items() if s.line == update.selected_at}
        other_work = any(n > update.line and n not in claim_lines for n in fa.work_lines) or \
            any(n > update.line and n not in claim_lines and name in rows for n, name in fa.handed_on)
        if other_work or not update.same_for_all:
            fa.report(update.node, "TXN105", update.message, deferrable=True,
                      confidence=Confidence.MEDIUM, assessment=update.assessment)
    fa.update_claims = []
