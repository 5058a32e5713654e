"""TXN105 on a lock taken too late: a ``select_for_update()`` queryset first run by its own
``update()``/``delete()``, or never run at all (facts: ``facts/lazy_locks.py``).

Reported when the function did something with the rows it meant to hold before the lock
was taken (a call between the binding and the first use: a read, a method of the row) and
writes or inserts besides the queryset's own statement: that write is computed from reads
no lock covered, the check-then-act the lock was written to prevent. A lazy queryset that
only runs its own update (``qs = ...select_for_update(); qs.update(...)``) is left alone:
the UPDATE locks its rows itself, and nothing depends on a read before it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from ..facts.lazy_locks import LazyLock, lazy_locks
from ..facts.model import Confidence
from ..flow.events import FunctionEnded
from . import severity

if TYPE_CHECKING:
    from ..flow.state import FunctionState

CODE = "TXN105"


def message(lock: LazyLock) -> Optional[str]:
    """The finding for ``lock``, or None when nothing depends on it."""
    if not lock.reads or not lock.writes:
        return None
    if lock.first_use is None:
        return (f"{CODE} check-then-act: `{lock.name}` (line {lock.bound}) is a select_for_update() "
                f"queryset that never runs, so no row is locked, and the write at line "
                f"{lock.writes[-1]} relies on reads no lock covered; evaluate it "
                f"(`row = qs.get()`, `list(qs)`) inside the transaction and compute from the locked row")
    return (f"{CODE} check-then-act: `{lock.name}` (line {lock.bound}) is a select_for_update() "
            f"queryset first run by `{lock.name}.{lock.verb}()` at line {lock.first_use}; a queryset "
            f"takes its row locks when it runs, so the reads before that line ran unlocked and the "
            f"write at line {lock.writes[-1]} relies on them; evaluate the lock first "
            f"(`row = qs.get()`, `list(qs)`) and compute from the locked row")


def on_function_end(fa: "FunctionState", event: FunctionEnded) -> None:
    """TXN105 for a ``select_for_update()`` queryset first run by its own update (subscribed
    to ``FUNCTION_END``: the writes after the lock are all known)."""
    if "select_for_update" not in fa.mod.source:
        return
    for lock in lazy_locks(fa.node, fa.line):
        if fa.reported_write_lines.intersection(lock.writes):
            continue        # the write is reported already, for the read the lock did not cover
        found = message(lock)
        if found is not None:
            fa.report(lock.bound, CODE, found, confidence=Confidence.MEDIUM,
                      assessment=severity.plain("a row lock taken after the reads it should cover"))
