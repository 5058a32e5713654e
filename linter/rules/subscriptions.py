"""Which rules each kind of the walk's events goes to (``flow/events.py``), in the order they decide.

The entry points (``txnsafety_lint.analysis``) hand :data:`RULES` to the module driver; the walk
emits each event as it meets it and ``flow.subscribers.Subscribers.dispatch`` hands it to these
handlers.  A handler takes the function's state (``flow.state.FunctionState``) and the event
and reports through ``FunctionState.report``.  The order within a kind is the order of the
reports on one line (a two-copies finding before the read-modify-write one), so it is kept
here, not left to import order.  Kinds no rule subscribes to (reads, changes, checks,
protection entered and left) are still recorded in the function's ``events``.

Three kinds come at other moments than a statement: ``FUNCTION_END`` when the walk is over
(compare-and-set claims, the get-or-create contract, locks taken too late: all need every
write of the function), and ``CALL_RESOLVED`` when the project's call sites are joined to
their callees (a helper writing its caller's row, a helper re-reading it, an insert after
the caller's check).
"""
from __future__ import annotations

from ..flow.events import EventKind
from ..flow.subscribers import Handler, Subscribers
from . import check_then_act, claim, consume, get_or_create, lazy_lock, lock_outside_transaction
from . import locked_get_or_create, read_modify_write, side_effect, two_copies, unkeyed_get_or_create

SUBSCRIPTIONS: dict[EventKind, tuple[Handler, ...]] = {
    EventKind.FOR_UPDATE_READ: (lock_outside_transaction.on_locked_read, locked_get_or_create.on_locked_read),
    EventKind.WRITE: (two_copies.on_write, read_modify_write.on_write),
    EventKind.STORE: (claim.on_store,),
    EventKind.ACT: (check_then_act.on_act,),
    EventKind.SIDE_EFFECT: (side_effect.on_side_effect,),
    EventKind.CALL: (consume.on_call, unkeyed_get_or_create.on_call),
    EventKind.SELECTED_ROWS_UPDATED: (claim.on_selected_rows_updated,),
    EventKind.AGGREGATE_STORED: (check_then_act.on_aggregate_stored,),
    EventKind.FUNCTION_END: (claim.on_function_end, get_or_create.on_function_end, lazy_lock.on_function_end),
    EventKind.CALL_RESOLVED: (read_modify_write.on_call_resolved, two_copies.on_call_resolved,
                              check_then_act.on_call_resolved),
}

#: every rule, as the walk hears them (the dict above, by reference: a test may take one out)
RULES = Subscribers(SUBSCRIPTIONS)
