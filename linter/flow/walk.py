"""The per-function dataflow: a statement-ordered walk of one function body.

It tracks which names hold entities (read by a get, returned by a loader, given as
parameters or ``self`` of a model method), how they are mutated (blind, derived, counter,
atomic), where they are written, the checks made before an insert, and the stack of
transactions and locks around every read and write. Read-modify-write verdicts come from
:mod:`.rules.read_modify_write`; the walk hands them the facts.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import libcst as cst

from ..facts.config import IMPORT_ROOTS, NOT_LOCKS, Vocab, name_matches
from .events import Checked, Event, Mutated, ProtectionEntered, ProtectionLeft
from ..facts.model import Check, Confidence, Entity, Finding, Mutation, Scope
from ..facts.sessions import cst_local_names, is_session_type, shape_of_cst
from ..facts.syntax import MANAGERS, code_of, dotted, is_model_name
from ..facts.module_facts import GetInfo, MANAGER_BASES
from ..facts.provenance import request_data
from ..facts.lazy_locks import lazy_locks
from . import presence
from ..rules import lazy_lock
from ..rules.claim import Selection, matters
from ..rules.claim import message as claim_message
from ..rules.subscriptions import SUBSCRIPTIONS

from .statements import StatementWalk
from .reads import ReadFacts
from .assign import AssignFacts
from .calls import CallFacts
from .writes import WriteFacts
from .checks import CheckFacts
from .records import CallSite, Returned, _Positions  # noqa: F401  (re-exported)

if TYPE_CHECKING:  # the module driver creates the walks; only its type is named here
    from ..project.module_analysis import ModuleAnalyzer


class FunctionAnalyzer(StatementWalk, ReadFacts, AssignFacts, CallFacts, WriteFacts, CheckFacts):
    """Walks one function body in statement order."""

    def __init__(self, mod: "ModuleAnalyzer", node: cst.FunctionDef, positions, offset: int,
                 qualname: str, is_method: bool, outer: Optional["FunctionAnalyzer"] = None):
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

    def _names(self, outer: Optional["FunctionAnalyzer"]) -> None:
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
        self.check_vars: dict[str, tuple] = {}
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
        self.claims: list[tuple] = []
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
        self.rmw_getters: dict[str, tuple] = {}
        self.inherited_rmw: dict[str, tuple] = {}
        self.deferred: list[tuple[Finding, str]] = []
        self.call_sites: list[CallSite] = []
        #: unguarded inserts (line, model): a caller's check may be what they depend on
        self.creates: list[tuple[int, Optional[str]]] = []
        #: a loader's entity (Returned) or a lookup's answer (presence.Presence)
        self.returned: Optional[Returned] = None
        #: checks made in helpers, the get-or-create contract (presence.py)
        self.helper_checks = presence.State()
        #: the rows it yields or returns unevaluated, for its callers' loops (row_streams.py)
        self.yielded: Optional[Returned] = None
        #: what happened, in statement order (events.py)
        self.events: list[Event] = []

    # -- events (events.py): recorded, and handed to the rules subscribed to their kind
    def emit(self, event: Event) -> None:
        self.events.append(event)
        for handler in SUBSCRIPTIONS.get(event.kind, ()):
            handler(self, event)

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

    def col(self, node: cst.CSTNode) -> int:
        return self.positions.col(node)

    def report(self, node_or_line, code: str, message: str, col: int = 0,
               deferrable: bool = False, need: str = "any",
               confidence: Confidence = Confidence.HIGH) -> None:
        if not self.mod.cfg.code_enabled(code):
            return
        line = node_or_line if isinstance(node_or_line, int) else self.line(node_or_line)
        if not isinstance(node_or_line, int):
            col = self.col(node_or_line)
        f = Finding(line, col, code, message, confidence=confidence)
        if deferrable and self.outer is None:
            self.deferred.append((f, "txn" if code == "TXN108" else need))
        else:
            self.mod.add(f)

    # -- entry
    def run(self) -> None:
        node = self.node
        line = self.line(node)
        # decorators: transactions and locks around the whole body
        for dec in node.decorators:
            scope = self.scope_for(dec.decorator, self.line(dec), decorator=True)
            if scope is not None:
                self.enter(scope)
        if self.name in self.mod.info.txn_targets:
            retrying = self.mod.info.txn_targets[self.name]
            ndb = "ndb" in self.mod.info.frameworks
            serializable = self.vocab.ndb_serializable if ndb else not self.vocab.weak_isolation
            label = self.mod.info.txn_runners.get(self.name, "a transaction runner")
            self.enter(Scope("txn", label, line, retrying=retrying, serializable=serializable,
                             decorator=True, framework="ndb" if ndb else None))
        if self.mod.session_types is not None:
            # this function's own names are not the module's (nor an enclosing function's)
            self.types.update(dict.fromkeys(cst_local_names(node), ""))
        if self.is_method and self.outer is None and \
                self.mod.info.is_model_class(self.qualname.split(".", 1)[0], bases=MANAGER_BASES):
            # a custom manager's or queryset's method: ``self.get(...)`` / ``self.create(...)``
            # are ``Model.objects.get(...)`` / ``.create(...)``
            self.querysets["self"] = GetInfo(None, None, None, "django")
        params = node.params
        for p in list(params.posonly_params) + list(params.params) + list(params.kwonly_params):
            pname = p.name.value
            self.param_order.append(pname)
            if pname == "cls":
                continue
            self.types[pname] = self.param_type(p, first=not self.param_order[:-1])
            if request_data(p):
                continue        # a form or serializer: the request's values, not a row read
            ent = self.self_entity(pname, line) or Entity(pname, line, (), "param", framework=None)
            if self.is_receiver() and pname not in ("sender", "self"):
                # a signal receiver's rows were read by the sender, which no call here shows
                ent.source, ent.via = "call", "the signal's sender"
            self.params[pname] = ent
            self.entities[pname] = ent
            self.taint.pop(pname, None)
        self.block(node.body)
        self.finish_claims()
        presence.finish(self)
        self.finish_lazy_locks()

    def finish_lazy_locks(self) -> None:
        """TXN105 for a ``select_for_update()`` queryset first run by its own update."""
        if "select_for_update" not in self.mod.source:
            return
        for lock in lazy_locks(self.node, self.line):
            if self.reported_write_lines.intersection(lock.writes):
                continue        # the write is reported already, for the read the lock did not cover
            found = lazy_lock.message(lock)
            if found is not None:
                self.report(lock.bound, lazy_lock.CODE, found, confidence=Confidence.MEDIUM)

    def is_receiver(self) -> bool:
        """A signal receiver: its parameters are rows the sender read, and no call in the
        project shows that read, so its writes of them are judged here."""
        return self.outer is None and self.name in self.mod.info.receivers

    def finish_claims(self) -> None:
        """TXN105 for the compare-and-set writes that matter, now that every write of the
        function is known (``rules/claim.py``)."""
        for found, w_line, verb in self.claims:
            ent = found.entity
            other_work = any(n > w_line for n in self.work_lines) or \
                any(n > w_line and name in (ent.name, ent.name.split(".")[0], self.loop_of.get(ent.name))
                    for n, name in self.handed_on)      # ``user`` of ``user.plan.recurring`` too
            if not matters(found, other_work) or w_line in self.sure_write_lines:
                continue
            fw = found.entity.framework or self.framework_hint()
            self.drop_stale_copy(w_line)
            self.report(w_line, "TXN105", claim_message(found, w_line, verb, fw), deferrable=True,
                        confidence=Confidence.MEDIUM)
        self.claims = []

    def drop_stale_copy(self, line: int) -> None:
        """The low-confidence stale-copy finding at ``line`` says less than the claim there."""
        def stale(f: Finding) -> bool:
            return f.line == line and f.confidence is Confidence.LOW and f.code in ("TXN101", "TXN102")
        self.deferred = [(f, need) for f, need in self.deferred if not stale(f)]
        self.mod.findings[:] = [f for f in self.mod.findings if not stale(f)]

    def self_entity(self, pname: str, line: int) -> Optional[Entity]:
        """``self`` of a model's method: a row its caller read, wherever that was.

        ``self.failures += 1; self.save()`` in a model method is a read-modify-write whose
        read happened before the method was called; the method cannot show that read's
        protection, so the row counts as read outside any transaction or lock (as the
        runtime would see it unless the caller re-read it under one)."""
        if pname != "self" or not self.is_method or self.outer is not None or self.param_order != ["self"]:
            return None
        cls = self.qualname.split(".", 1)[0]
        if not self.mod.info.is_model_class(cls):
            return None
        fw = self.framework_hint()
        return Entity("self", line, (), "self", model=cls, framework=fw,
                      versioned=cls in self.mod.info.versioned, policy=self.mod.policy_of(cls),
                      via=f"`{self.qualname}()`")

    # -- scopes
    def scope_for(self, expr: cst.BaseExpression, line: int, decorator: bool = False,
                  as_name: Optional[str] = None) -> Optional[Scope]:
        call = expr if isinstance(expr, cst.Call) else None
        name = dotted(expr)
        if not name:
            return None
        label = code_of(expr) if len(code_of(expr)) < 60 else name + "(...)"
        v = self.vocab
        if name_matches(name, NOT_LOCKS):
            return None
        last = name.rsplit(".", 1)[-1]
        if name_matches(name, v.transactions) and not self.foreign_name(name):
            if last in ("begin", "begin_nested") and call is None:
                return None
            retrying = name_matches(name, v.retrying)
            is_ndb = last in ("transactional", "transaction", "run_in_transaction",
                              "transactional_tasklet", "transaction_async") or \
                name.startswith(("ndb.", "db."))
            fw = "ndb" if is_ndb else ("sqlalchemy" if last in ("begin", "begin_nested") else "django")
            serializable = (v.ndb_serializable if fw == "ndb" else not v.weak_isolation)
            session = None
            if last in ("begin", "begin_nested"):
                recv = name.rsplit(".", 1)[0] if "." in name else None
                session = as_name or recv
            return Scope("txn", label, line, retrying=retrying, serializable=serializable,
                         decorator=decorator, session=session, framework=fw)
        if name_matches(name, v.locks) and call is not None:
            return Scope("lock", label, line, decorator=decorator)
        return None

    def foreign_name(self, name: str) -> bool:
        """A bare name imported from a module of no framework (``from myapp.db import
        transactional``) that configuration does not name: the project's own function, not
        the framework's namesake (mailman's ``@transactional`` commits once, never retries)."""
        if "." in name or name not in self.mod.info.imports:
            return False
        origin = self.mod.info.imports[name][0]
        if any(origin == root or origin.startswith(root + ".") for root in IMPORT_ROOTS):
            return False
        cfg = self.mod.cfg
        return not name_matches(name, {n for n in cfg.transactions | cfg.retrying_transactions if "." not in n})

    # -- sessions made by factories (see sessions.py)
    def resolved_type(self, expr: cst.BaseExpression) -> Optional[str]:
        """What ``expr`` holds when it can be resolved from definitions (a session, a
        session factory, an instance of a class holding one...), else None."""
        types = self.mod.session_types
        if types is None:
            return None
        return types.expression_type(self.mod.filename, shape_of_cst(expr), self.types)

    def param_type(self, param: cst.Param, first: bool) -> str:
        """A parameter's type from its annotation (``stack: SyncStack``), or ``self`` in a
        method; "" when unknown (the local hides a module-level name of the same spelling)."""
        types = self.mod.session_types
        if types is None:
            return ""
        if first and self.is_method and self.outer is None and param.name.value == "self":
            cls = self.qualname.rpartition(".")[0]       # "Outer.Inner": not a module-level class
            return f"inst:{self.mod.filename}:{cls}" if cls and "." not in cls else ""
        if param.annotation is None:
            return ""
        shape = shape_of_cst(param.annotation.annotation, annotation=True)
        return types.param_type(self.mod.filename, shape) or ""

    def note_local(self, name: str, value: cst.BaseExpression) -> None:
        """Remember what local ``name`` now holds; a resolved session joins ``sessions``."""
        t = self.resolved_type(value) if isinstance(value, (cst.Call, cst.Name, cst.Attribute,
                                                            cst.Await)) else None
        self.types[name] = t or ""
        if is_session_type(t):
            self.sessions.add(name)

    def typed_session(self, expr: Optional[cst.BaseExpression]) -> bool:
        return expr is not None and is_session_type(self.resolved_type(expr))

    def stack_ids(self) -> set[int]:
        return {id(s) for s in self.stack}

    def in_txn(self) -> Optional[Scope]:
        for s in reversed(self.stack):
            if s.kind == "txn":
                return s
        return None

    def manager_chain(self, names: list[str]) -> bool:
        """``M.objects...``, ``M._default_manager...`` or a manager the project's models
        declare (``OrderPosition.all.get()``)."""
        if MANAGERS.intersection(names[1:]):
            return True
        return len(names) > 1 and names[1] in self.mod.cfg.managers and is_model_name(names[0])

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

    def framework_hint(self) -> Optional[str]:
        fws = self.mod.info.frameworks
        for fw in ("django", "sqlalchemy", "ndb"):
            if fw in fws:
                return fw
        return None
