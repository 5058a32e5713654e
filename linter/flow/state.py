"""The state of one function's walk: the function's model, which judges nothing.

What the walk (:mod:`.walk`) has learnt so far about one function: which names hold rows
(entities), how they were changed, the checks and acts, the transactions and locks held, the
writes, and what the function's callers will learn from it (its summary).  The rules
(``rules/``) read it, as Ruff's rules read its semantic model, when an event reaches them
(:meth:`FunctionState.emit`), and report through :meth:`FunctionState.report`; they never
see the walk's class.  The walk's parts (``flow/statements.py``, ``reads.py`` ...) fill it
in.

Which rules hear the events is not decided here: the module's driver holds the
:class:`~.subscribers.Subscribers` the entry point handed it (``mod.subscribers``).
"""
from __future__ import annotations

from typing import Any, Optional

import libcst as cst

from ..facts.config import Vocab
from ..facts.model import UNASSESSED, Assessment, Check, Confidence, Entity, Finding, Mutation, Need, Scope
from ..facts.minted import minted_names
from ..facts.module_facts import GetInfo
from ..facts.query_selection import Selection
from ..facts.values import InsertValues
from .events import Checked, Event, Mutated, ProtectionEntered, ProtectionLeft
from .records import CallSite, Deferred, HelperChecks, PendingClaim, PendingUpdateClaim, Returned, Settle, _Positions


class FunctionState:
    """One function as the walk has seen it so far (see the module's docstring)."""

    def __init__(self, mod: Any, node: cst.FunctionDef, positions: _Positions, offset: int,
                 qualname: str, is_method: bool, outer: Optional["FunctionState"] = None):
        #: the module's driver (``project/module_analysis.ModuleAnalyzer``): its facts, its
        #: settings (``mod.cfg``), its findings and the rules it was handed
        self.mod = mod
        self.node = node
        self.positions = positions
        self.offset = offset
        self.qualname = qualname
        self.name = node.name.value
        self.outer = outer
        self.vocab: Vocab = mod.vocab
        self.is_method = is_method
        self._names(outer)
        self._walk_state()
        self._summary()

    def _names(self, outer: Optional["FunctionState"]) -> None:
        """What the function's names hold; a nested function starts from its outer one's."""
        self.entities: dict[str, Entity] = dict(outer.entities) if outer else {}
        self.taint: dict[str, set] = dict(outer.taint) if outer else {}
        #: local -> the (entity name, field) pairs its value was made from (``d = x.due``)
        self.field_taint: dict[str, set] = dict(outer.field_taint) if outer else {}
        self.querysets: dict[str, GetInfo] = dict(outer.querysets) if outer else {}
        #: the names a queryset was built from (``qs = M.objects.filter(**kw)``: ``kw``), so a
        #: check on ``qs`` shares its values with an insert made from them
        self.queryset_keys: dict[str, frozenset] = dict(outer.queryset_keys) if outer else {}
        self.sessions: set[str] = set(outer.sessions) if outer else set()
        #: local name -> what it holds, as sessions.SessionTypes resolves it ("": unknown)
        self.types: dict[str, str] = dict(outer.types) if outer else {}
        #: variables holding rows or ids a query selected by state (``rules/claim.py``)
        self.selections: dict[str, Selection] = dict(outer.selections) if outer else {}
        self.stack: list[Scope] = list(outer.stack) if outer else []

    def _walk_state(self) -> None:
        """What the walk keeps as it goes: new rows, checks, locks, writes."""
        self.new_objects: dict[str, str] = {}
        self._minted: Optional[frozenset[str]] = None
        #: names bound to what a getter returned (``parent, _ = await self._get_artifact(..)``):
        #: a row that exists, so ``session.add(parent)`` re-attaches it and inserts nothing
        self.fetched_rows: set[str] = set()
        #: ... the columns seen set on each (constructor keywords, then ``obj.col = v``) and
        #: what each value is made from; absent when a constructor hides some (``M(**data)``)
        self.new_object_values: dict[str, InsertValues] = {}
        self.check_vars: dict[str, tuple] = {}
        #: for an update's row count kept in a variable: whether its change is relative
        self.update_relative: dict[str, bool] = {}
        #: the names a check kept in a variable was computed from (``exists = ...filter(k=key)``)
        self.check_keys: dict[str, set[str]] = {}
        #: ... and the columns its lookup compared
        self.check_lookups: dict[str, Optional[frozenset]] = {}
        self.row_locks: list[tuple[int, Optional[Scope]]] = []
        #: line of a row lock -> the model it locked rows of (a lock on rows of the model a
        #: missing-row check looks in does not stop an insert of a new one)
        self.lock_models: dict[int, Optional[str]] = {}
        self.checks: list[Check] = []
        self.integrity_depth = 0
        #: ``IntegrityError`` handlers around the statement that apply the change again
        #: (``except IntegrityError: qs.update(...)``): the loser of an insert race keeps its work
        self.reapplying_depth = 0
        self.reported_write_lines: set[int] = set()
        #: compare-and-set writes seen (rules/claim.py), judged when the walk has ended
        self.claims: list[PendingClaim] = []
        #: updates of rows selected by state that set that state back, judged at the end too
        self.update_claims: list[PendingUpdateClaim] = []
        #: write lines reported at high confidence (a claim there is not reported again)
        self.sure_write_lines: set[int] = set()
        #: lines of every write and insert: what a double claim would do twice
        self.work_lines: list[int] = []
        #: (line, name): a row (or the rows a loop went over) handed to a call that is not
        #: logging, returned or yielded: work done with it
        self.handed_on: list[tuple[int, str]] = []
        #: loop variable -> the name of the rows it went over (``for t in rows``)
        self.loop_of: dict[str, str] = {}
        #: lines that write, insert or call a method of a row (what a lock protects)
        self.write_lines: list[int] = []
        #: conditions kept in names (``q |= Q(..)``) -> the columns they compare (conditions.py)
        self.conditions: dict[str, frozenset] = {}
        #: (line, row name or None, call): work a used-then-deleted row would do twice
        #: (rules/consume.py)
        self.effects: list[tuple] = []

    def _summary(self) -> None:
        """What callers learn from the function (the joins of call_joins.py and presence.py)."""
        self.params: dict[str, Entity] = {}
        self.param_order: list[str] = []
        self.param_writes: dict[str, tuple] = {}
        #: parameter -> the switches (``commit=False`` parameters) every write of it sits under
        #: (switches.py): a caller that leaves them off reaches no write
        self.param_write_guards: dict[str, frozenset[str]] = {}
        #: parameters off by default (``commit=False``), and those tested true around the statement
        self.off_switches: frozenset[str] = frozenset()
        self.switches_on: list[str] = []
        self.rmw_getters: dict[str, tuple] = {}
        self.inherited_rmw: dict[str, tuple] = {}
        self.deferred: list[Deferred] = []
        self.call_sites: list[CallSite] = []
        #: unguarded inserts (line, model): a caller's check may be what they depend on
        self.creates: list[tuple[int, Optional[str]]] = []
        #: a loader's entity (Returned) or a lookup's answer (presence.Presence)
        self.returned: Optional[Returned] = None
        #: checks made in helpers, the get-or-create contract (presence.py)
        self.helper_checks = HelperChecks()
        #: the rows it yields or returns unevaluated, for its callers' loops (row_streams.py)
        self.yielded: Optional[Returned] = None
        #: what happened, in statement order (events.py)
        self.events: list[Event] = []

    # -- events (events.py): recorded, and handed to the rules subscribed to their kind
    def emit(self, event: Event) -> None:
        self.events.append(event)
        self.mod.subscribers.dispatch(self, event)

    def publish(self, event: Event) -> None:
        """Hand ``event`` to the rules without recording it: a join made after the walk
        (``CallResolved``), not something the function's statements did."""
        self.mod.subscribers.dispatch(self, event)

    def enter(self, scope: Scope) -> None:
        """A transaction or lock taken: held by the statements that follow until ``leave``."""
        self.stack.append(scope)
        self.emit(ProtectionEntered(scope.line, tuple(self.stack), scope))

    def leave(self, scope: Scope, line: int) -> None:
        self.stack.remove(scope)
        self.emit(ProtectionLeft(line, tuple(self.stack), scope))

    def mutate(self, ent: Entity, mutation: Mutation) -> None:
        """A field of a row changed in Python, kept until the row is written."""
        ent.pending.append(mutation)
        self.emit(Mutated(mutation.line, tuple(self.stack), ent, mutation))

    def add_check(self, check: Check) -> None:
        """A check an act may depend on (rules/check_then_act.py)."""
        self.checks.append(check)
        self.emit(Checked(check.line, tuple(self.stack), check))

    # -- positions
    def line(self, node: cst.CSTNode) -> int:
        return self.positions.line(node) + self.offset

    def call_order(self) -> list[str]:
        """The parameters a call's positional arguments fill, in order (a method's ``self`` left
        out: the receiver fills it)."""
        order = list(self.param_order)
        return order[1:] if self.is_method and order and order[0] == "self" else order

    def note_param_write(self, name: str, record: tuple) -> None:
        """A write of the parameter ``name`` (``record``: line, mutations, kind) callers judge at
        their call; the first is kept, the switches around every one are intersected."""
        self.param_writes.setdefault(name, record)
        guards = frozenset(self.switches_on)
        before = self.param_write_guards.get(name)
        self.param_write_guards[name] = guards if before is None else before & guards

    def last_line(self, node: cst.CSTNode) -> int:
        return self.positions.last_line(node) + self.offset

    def col(self, node: cst.CSTNode) -> int:
        return self.positions.col(node)

    def report(self, node_or_line, code: str, message: str, col: int = 0,
               deferrable: bool = False, need: Need = Need.ANY,
               confidence: Confidence = Confidence.HIGH, settle: Optional[Settle] = None,
               assessment: Assessment = UNASSESSED) -> None:
        """A finding at ``node_or_line``.  ``deferrable``: an unprotected top-level function's
        finding waits for its callers (``project/call_joins.py``), who may all hold ``need``
        around the call; ``settle`` then adjusts it with what they showed."""
        code = str(code)        # a ``txnsafety.codes.Code`` or its text
        if not self.mod.cfg.code_enabled(code):
            return
        line = node_or_line if isinstance(node_or_line, int) else self.line(node_or_line)
        if not isinstance(node_or_line, int):
            col = self.col(node_or_line)
        f = Finding(line, col, code, message, confidence=confidence, severity=assessment.severity,
                    severity_reason=assessment.reason)
        if deferrable and self.outer is None:
            self.deferred.append(Deferred(f, need, settle))
        else:
            self.mod.add(f)

    def drop_stale_copy(self, line: int) -> None:
        """The low-confidence stale-copy finding at ``line`` says less than a claim there."""
        def stale(f: Finding) -> bool:
            return f.line == line and f.confidence is Confidence.LOW and f.code in ("TXN101", "TXN102")
        self.deferred = [d for d in self.deferred if not stale(d.finding)]
        self.mod.findings[:] = [f for f in self.mod.findings if not stale(f)]

    def is_write_name(self, term: str) -> bool:
        return term in ("save", "put")

    def stack_ids(self) -> set[int]:
        return {id(s) for s in self.stack}

    def in_txn(self) -> Optional[Scope]:
        for s in reversed(self.stack):
            if s.kind == "txn":
                return s
        return None

    def protected_now(self, missing_in: frozenset = frozenset()) -> bool:
        """Is a check made now atomic with what follows in the same scopes?  ``missing_in``:
        the models a missing-row check looks in; a row lock on one of them locks rows that
        exist, not the gap a new row goes into (a parent's row lock does serialize)."""
        for s in self.stack:
            if s.kind == "lock" or (s.kind == "txn" and s.serializable):
                return True
        ids = self.stack_ids()
        for line, txn in self.row_locks:
            if (txn is None or id(txn) in ids) and self.lock_models.get(line) not in missing_in:
                return True
        return False

    def release_row_locks(self, line: int) -> None:
        for ent in set(self.entities.values()):
            if ent.for_update and ent.released_line is None and ent.framework == "sqlalchemy":
                ent.released_line = line
        self.row_locks = [(ln, txn) for ln, txn in self.row_locks if txn is not None]

    def minted(self) -> frozenset[str]:
        """The locals holding a key this function made for itself (``facts/minted.py``),
        found once per function, when a rule first asks."""
        if self._minted is None:
            self._minted = minted_names(self.node)
        return self._minted

    def framework_hint(self) -> Optional[str]:
        fws = self.mod.info.frameworks
        for fw in ("django", "sqlalchemy", "ndb"):
            if fw in fws:
                return fw
        return None
