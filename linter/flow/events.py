"""The walk's typed events: what happened in one function, in statement order.

The per-function walk (``walk.FunctionAnalyzer``) judges nothing.  As it meets a row read,
a change to a field, a write, a check, an act, a transaction or lock entered or left, a
side effect or a ``FOR UPDATE`` read, it emits one of the events below:
``FunctionState.emit`` appends it to the function's ``events`` and hands it, at once, to
the rules subscribed to its kind (``subscribers.py``, wired in ``rules/subscriptions.py``), which decide and report.  A
rule reads the event and the walk's state as it stands at that moment (the open checks, the
names that hold rows), so it decides exactly where the walk is.

Each event carries the protection held when it happened (``scopes``: the transactions and
locks, innermost last) and its line.  The payloads are the walk's own records (an
:class:`~.model.Entity`, a :class:`~.model.Check`, an :class:`~.model.Act`), not copies: read
them when the event is dispatched; a rule that keeps something for later keeps what it
needs.  Nothing here names a field's value: reports never include them.
"""
from __future__ import annotations

import dataclasses
import enum
from typing import Any, ClassVar, Optional

import libcst as cst

from ..facts.model import Act, Check, Entity, Mutation, Scope
from ..facts.module_facts import GetInfo
from ..facts.query_selection import Selection
from .records import CallSite


class EventKind(enum.Enum):
    READ = "read"                              # a row read into a name (a get, a loader, a loop)
    FOR_UPDATE_READ = "for update read"        # a read that takes row locks
    MUTATION = "mutation"                      # a field of a row changed in Python
    WRITE = "write"                            # a row's changes written back
    CHECK = "check"                            # a test an act may depend on
    ACT = "act"                                # an insert, save, update or delete
    PROTECTION_ENTERED = "protection entered"  # a transaction or lock taken
    PROTECTION_LEFT = "protection left"
    SIDE_EFFECT = "side effect"                # an effect outside the database
    CALL = "call"                              # any call (work done with a row, a row deleted)
    STORE = "store"                            # any write of a row, whatever its changes derive from
    SELECTED_ROWS_UPDATED = "selected rows updated"  # an update of rows a variable selected by state
    AGGREGATE_STORED = "aggregate stored"      # a model method stores an aggregate's result on ``self``
    FUNCTION_END = "function end"              # the walk of the function is over
    CALL_RESOLVED = "call resolved"            # a call site joined to its callee (after every walk)


@dataclasses.dataclass(frozen=True, eq=False)
class Event:
    kind: ClassVar[EventKind]
    line: int
    #: transactions and locks held when it happened, innermost last
    scopes: tuple[Scope, ...]

    @property
    def transaction(self) -> Optional[Scope]:
        """The innermost transaction held when it happened (None: autocommit)."""
        return next((s for s in reversed(self.scopes) if s.kind == "txn"), None)


@dataclasses.dataclass(frozen=True, eq=False)
class RowRead(Event):
    kind: ClassVar[EventKind] = EventKind.READ
    entity: Entity


@dataclasses.dataclass(frozen=True, eq=False)
class LockedRead(Event):
    """``select_for_update()`` / ``with_for_update()`` evaluated: by a get, or by a loop
    over the rows (``in_loop``)."""

    kind: ClassVar[EventKind] = EventKind.FOR_UPDATE_READ
    read: GetInfo
    node: cst.CSTNode
    in_loop: bool = False


@dataclasses.dataclass(frozen=True, eq=False)
class Mutated(Event):
    kind: ClassVar[EventKind] = EventKind.MUTATION
    entity: Entity
    mutation: Mutation


@dataclasses.dataclass(frozen=True, eq=False)
class Written(Event):
    """A row's changes written back that the read-modify-write rules judge.

    ``changes``: the changes that matter (for ``self`` in a model method, only those derived
    from its own old value); ``how``: "save", "fields" (``update_fields``), "flush" or "put";
    ``scopes``: for a parameter, only the protection this function takes itself."""

    kind: ClassVar[EventKind] = EventKind.WRITE
    entity: Entity
    changes: tuple[Mutation, ...]
    how: str
    fields: Optional[frozenset]
    verb: str
    node: cst.CSTNode
    #: the column of the report (0 when the write has no node of its own: a commit's flush)
    at_node: bool = True


@dataclasses.dataclass(frozen=True, eq=False)
class Checked(Event):
    kind: ClassVar[EventKind] = EventKind.CHECK
    check: Check


@dataclasses.dataclass(frozen=True, eq=False)
class Acted(Event):
    kind: ClassVar[EventKind] = EventKind.ACT
    act: Act
    node: cst.CSTNode


@dataclasses.dataclass(frozen=True, eq=False)
class ProtectionEntered(Event):
    kind: ClassVar[EventKind] = EventKind.PROTECTION_ENTERED
    scope: Scope


@dataclasses.dataclass(frozen=True, eq=False)
class ProtectionLeft(Event):
    """The block that took ``scope`` ended (the event's line is the block's first)."""

    kind: ClassVar[EventKind] = EventKind.PROTECTION_LEFT
    scope: Scope


@dataclasses.dataclass(frozen=True, eq=False)
class SideEffect(Event):
    """A call the settings name a side effect (``side_effects``), not a write, not a task
    that joins the transaction."""

    kind: ClassVar[EventKind] = EventKind.SIDE_EFFECT
    name: str
    node: cst.CSTNode


@dataclasses.dataclass(frozen=True, eq=False)
class Called(Event):
    """A call, whatever it does (the rules that watch work done with a row hear every one)."""

    kind: ClassVar[EventKind] = EventKind.CALL
    node: cst.Call


@dataclasses.dataclass(frozen=True, eq=False)
class Stored(Event):
    """Any write of a row (``Written`` carries only the changes that make it a
    read-modify-write): ``written``, every change the write carries."""

    kind: ClassVar[EventKind] = EventKind.STORE
    entity: Entity
    written: tuple[Mutation, ...]
    verb: str


@dataclasses.dataclass(frozen=True, eq=False)
class SelectedRowsUpdated(Event):
    """``filter(id__in=ids).update(owner=me)`` where ``ids`` was selected by state:
    ``selections``, the variables the update's condition names (by name); ``set_columns``,
    what it sets; ``compared``, the state its own condition compares again; ``literal``, the
    set columns given a literal (``is_active=False``: every caller writes the same)."""

    kind: ClassVar[EventKind] = EventKind.SELECTED_ROWS_UPDATED
    node: cst.Call
    selections: tuple[Selection, ...]
    set_columns: frozenset
    compared: frozenset
    literal: frozenset = frozenset()


@dataclasses.dataclass(frozen=True, eq=False)
class AggregateStored(Event):
    """``self.number = last + 1`` in a model method: ``used``, the names the value reads."""

    kind: ClassVar[EventKind] = EventKind.AGGREGATE_STORED
    target: cst.Attribute
    used: frozenset


@dataclasses.dataclass(frozen=True, eq=False)
class FunctionEnded(Event):
    """The walk is over: every write, claim and return of the function is known."""

    kind: ClassVar[EventKind] = EventKind.FUNCTION_END


@dataclasses.dataclass(frozen=True, eq=False)
class CallResolved(Event):
    """A call site joined to the function it calls, once every function is walked
    (``project/call_joins.py``); the caller is the state the event is handed with."""

    kind: ClassVar[EventKind] = EventKind.CALL_RESOLVED
    site: CallSite
    #: the callee's state (``flow.state.FunctionState``)
    callee: Any
