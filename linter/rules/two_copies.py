"""TXN103 internal stomp: one request holds two objects for the same row and writes both,
so the second write erases the first one's change, with no other request involved.

Two shapes, both found by the walk:

* in one function: ``a = get(pk)``, ``b = get(pk)``, ``b.x += 1; b.save()``, then
  ``a.save()`` (:func:`overwritten_by`);
* across a call: the caller holds the row, calls a helper that reads the same row by the
  same getter, changes and writes it, and the caller writes its own copy afterwards
  (:func:`on_call_resolved`, where call sites meet callees).

SQLAlchemy's identity map hands out one object per row and session, so two reads through
one session are one object: never reported.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Iterable, Optional

from ..facts.model import Entity, Finding
from ..flow.events import CallResolved, Written
from . import severity

if TYPE_CHECKING:
    from ..flow.state import FunctionState

CODE = "TXN103"


def overwritten_by(ent: Entity, others: Iterable[Entity], w_line: int) -> Optional[Entity]:
    """The other object for ``ent``'s row whose change ``ent``'s write at ``w_line`` erases:
    read after ``ent``, changed from its own values, and written between the two."""
    if not ent.key:
        return None
    for other in others:
        if other is ent or other.key != ent.key or not other.writes:
            continue
        if ent.framework == "sqlalchemy" and ent.session == other.session:
            continue     # the identity map hands out one object per row and session
        first_write = min(other.writes)
        if other.had_rmw and ent.read_line < first_write < w_line and other.read_line <= w_line:
            return other
    return None


def message(ent: Entity, other: Entity, w_line: int) -> str:
    return (f"{CODE} internal: `{ent.name}` (read at line {ent.read_line}) and "
            f"`{other.name}` (read at line {other.read_line}) are two objects for the same "
            f"row; `{other.name}` is written at line {min(other.writes)}, then `{ent.name}` at "
            f"line {w_line} overwrites that change; read the row once and reuse the object")


def helper_message(ent: Entity, write_line: int, helper: str, call_line: int, where: str,
                   helper_lines: tuple) -> str:
    hr, hw = helper_lines
    return (f"{CODE} internal: `{ent.name}` read at line {ent.read_line} and "
            f"written at line {write_line}, but `{helper}()` called at line {call_line} "
            f"reads and writes the same `{ent.getter}` row as another object ({where} "
            f"{hr}/{hw}), and one write erases the other; pass `{ent.name}` to the helper "
            f"instead of re-reading")


def on_write(fa: "FunctionState", event: Written) -> None:
    """TXN103 in one function: two objects for the same row, both written."""
    other = overwritten_by(event.entity, set(fa.entities.values()), event.line)
    if other is not None:
        fa.report(event.line, CODE, message(event.entity, other, event.line), assessment=severity.internal())


def on_call_resolved(fa: "FunctionState", event: CallResolved) -> None:
    """TXN103 across a call: the caller holds the row and writes it after calling a helper
    that reads the same row by the same getter, changes and writes it (subscribed to
    ``CALL_RESOLVED``; ``fa`` is the caller)."""
    site, callee = event.site, event.callee
    summary = {**callee.inherited_rmw, **callee.rmw_getters}
    if not summary:
        return
    for ent in site.live:
        if ent.getter not in summary:
            continue
        later = [w for w in ent.writes if w > site.line]
        if ent.read_line < site.line and later and ent.had_rmw:
            where = "lines" if callee.mod is fa.mod else \
                f"{os.path.basename(callee.mod.filename) or 'another module'} lines"
            if fa.mod.cfg.code_enabled(CODE):
                judged = severity.internal()
                fa.mod.add(Finding(later[0], 0, CODE, helper_message(
                    ent, later[0], callee.name, site.line, where, summary[ent.getter]),
                    severity=judged.severity, severity_reason=judged.reason))
            return
