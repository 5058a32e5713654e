"""Which rules each kind of the walk's events goes to (``events.py``), in the order they decide.

``FunctionAnalyzer.emit`` hands an event to these handlers as the walk meets it; a handler
takes the walk and the event and reports through ``FunctionAnalyzer.report``.  The order
within a kind is the order of the reports on one line (a two-copies finding before the
read-modify-write one), so it is kept here, not left to import order.  Kinds no rule
subscribes to yet (reads, changes, checks, protection entered and left) are still
recorded in the function's ``events``.

A rule that decides from the whole function instead reads what the walk kept when it ends
(``FunctionAnalyzer.run``: compare-and-set claims, locks taken too late, the get-or-create
contract).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from ..flow.events import Event, EventKind
from . import check_then_act, lock_outside_transaction, locked_get_or_create, read_modify_write
from . import side_effect, two_copies

if TYPE_CHECKING:
    from ..flow.walk import FunctionAnalyzer

Handler = Callable[["FunctionAnalyzer", Event], None]

SUBSCRIPTIONS: dict[EventKind, tuple[Handler, ...]] = {
    EventKind.FOR_UPDATE_READ: (lock_outside_transaction.on_locked_read, locked_get_or_create.on_locked_read),
    EventKind.WRITE: (two_copies.on_write, read_modify_write.on_write),
    EventKind.ACT: (check_then_act.on_act,),
    EventKind.SIDE_EFFECT: (side_effect.on_side_effect,),
}
