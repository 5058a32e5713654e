"""The per-function dataflow: a statement-ordered walk of one function body.

It tracks which names hold entities (read by a get, returned by a loader, given as
parameters or ``self`` of a model method), how they are mutated (blind, derived, counter,
atomic), where they are written, the checks made before an insert, and the stack of
transactions and locks around every read and write. Read-modify-write verdicts come from
:mod:`.rules.read_modify_write`; the walk hands them the facts.
"""
from __future__ import annotations

import bisect
import os
import dataclasses
import re
from typing import TYPE_CHECKING, Optional

import libcst as cst


from .config import IMPORT_ROOTS, NOT_LOCKS, Vocab, name_matches
from .model import Check, CheckKind, Confidence, Entity, Finding, Mutation, Scope
from .sessions import cst_local_names, is_session_type, shape_of_cst
from .syntax import (
    DJANGO_GET_TERMINALS, INTEGRITY_ERRORS, MANAGERS, MAYBE_NONE, MUTATING_METHODS,
    NOT_FOUND_ERRORS, ORM_MARKERS, SQLA_TERMINALS, branches, chain, code_of, dotted, exits,
    first_arg_name, insert_keys, is_model_name, iter_calls, kids, kwarg, label, lookup_columns,
    maybe_models, models_in, names_in,
    non_numeric, receiver_prefix, terminal, walk_nodes)
from .module_facts import GetInfo, UNPROTECTED_POLICIES, MANAGER_BASES, protection_needed
from .provenance import identity_only, relation_change, request_data
from .rules.check_then_act import Act, ActKind, depends_on, normalises, unique_key_settles
from .rules.check_then_act import confidence as check_then_act_confidence
from .rules.check_then_act import close as close_checks
from .rules.check_then_act import message as check_then_act_message
from .rules.check_then_act import stored_aggregate_message
from .rules.claim import Selection, claimed, claimed_by_update, matters, update_message
from .rules.claim import message as claim_message
from .selection import request_row
from .selection import condition_names, is_constant, is_slice, related_model, set_columns, state_columns
from .rules.read_modify_write import compose, judge
from .rules import lock_outside_transaction as txn108
from . import conditions, presence, sqla_queries

if TYPE_CHECKING:  # the module driver creates the walks; only its type is named here
    from .module_analysis import ModuleAnalyzer


class _Positions:
    """Line/column of a node from libcst's byte spans (cheaper than PositionProvider)."""

    __slots__ = ("spans", "starts")

    def __init__(self, spans, source: str):
        self.spans = spans
        data = source.encode("utf-8")
        starts = [0]
        find = data.find
        i = find(b"\n")
        while i != -1:
            starts.append(i + 1)
            i = find(b"\n", i + 1)
        self.starts = starts

    def line(self, node: cst.CSTNode) -> int:
        return bisect.bisect_right(self.starts, self.spans[node].start)

    def col(self, node: cst.CSTNode) -> int:
        start = self.spans[node].start
        return start - self.starts[bisect.bisect_right(self.starts, start) - 1]


class CallSite:
    __slots__ = ("callee", "line", "col", "stack", "args", "live", "caller", "receiver",
                 "module_alias", "checks", "guarded", "names", "on_self")

    def __init__(self, callee, line, col, stack, args, live, caller, receiver, module_alias=None):
        self.module_alias = module_alias   # ``services`` in ``services.award_bonus(...)``
        self.callee = callee
        self.line = line
        self.col = col
        self.stack = stack
        self.args = args          # list of (position or keyword, Entity)
        self.live = live          # entities read before the call
        self.caller = caller
        self.receiver = receiver  # Entity for x.method(...)
        #: the caller's checks an insert here could depend on, as they stood at the call
        self.checks: tuple = ()
        #: inside an ``except IntegrityError`` guard of the caller
        self.guarded = False
        #: the names the call's arguments read
        self.names: frozenset = frozenset()
        #: ``self.method(...)`` in a method: the callee is this class's own
        self.on_self = False


#: class-name endings of objects whose ``save()`` inserts a row (DRF serializers, ModelForms)
_FORM_CLASSES = ("Serializer", "Form")


class Returned:
    """What a function returns when it returns an entity it read (a loader helper)."""

    __slots__ = ("info", "scopes", "line", "versioned", "policy")

    def __init__(self, info: GetInfo, scopes: tuple, line: int, versioned: bool,
                 policy: Optional[str] = None):
        self.info = info
        self.scopes = scopes        # the helper's transactions/locks at the read (end at return)
        self.line = line            # the read, in the helper's file
        self.versioned = versioned  # as the helper's module knows the model
        self.policy = policy        # likewise, the model's txnsafety policy


#: a selection that takes row locks: ``select_for_update()``, ``with_for_update()``, a
#: project helper that adds them (``with_row_locks(query, skip_locked=True)``)
_LOCKING = re.compile(r"for_update|skip_locked|nowait=|\b\w*_locks?\(|\block_\w*\(", re.I)

#: local names that hold a model class in generic code (``model(**kwargs)`` makes a row)
_CLASS_HOLDERS = frozenset({"model", "klass", "model_class", "model_cls", "related_model"})

#: a row picked by its position (what a prune deletes)
_PICKED = frozenset({"first", "last", "earliest", "latest"})

#: methods named for storing what they are given (a repository's or service's insert)
_STORING = re.compile(r"^(?:save|store|persist|insert|create|add)(?:_\w+)?$")

#: calls that only record something: a row passed to them is not work done with it
_LOGGING = re.compile(r"^(?:print|warn|log|logger|logging|_?log\w*|\w+\.(?:debug|info|warning|warn|error|"
                      r"exception|critical|log))$|^(?:self\.)?(?:logger|log|_logger|_log|LOGGER|LOG)\.")


class FunctionAnalyzer:
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
        self.entities: dict[str, Entity] = dict(outer.entities) if outer else {}
        self.taint: dict[str, set] = dict(outer.taint) if outer else {}
        #: local -> the (entity name, field) pairs its value was made from (``d = x.due``)
        self.field_taint: dict[str, set] = dict(outer.field_taint) if outer else {}
        self.querysets: dict[str, GetInfo] = dict(outer.querysets) if outer else {}
        self.sessions: set[str] = set(outer.sessions) if outer else set()
        #: local name -> what it holds, as sessions.SessionTypes resolves it ("": unknown)
        self.types: dict[str, str] = dict(outer.types) if outer else {}
        self.new_objects: dict[str, str] = {}
        self.check_vars: dict[str, tuple] = {}
        #: the names a check kept in a variable was computed from (``exists = ...filter(k=key)``)
        self.check_keys: dict[str, set[str]] = {}
        #: ... and the columns its lookup compared
        self.check_lookups: dict[str, Optional[frozenset]] = {}
        self.stack: list[Scope] = list(outer.stack) if outer else []
        self.row_locks: list[tuple[int, Optional[Scope]]] = []
        #: line of a row lock -> the model it locked rows of (a lock on rows of the model a
        #: missing-row check looks in does not stop an insert of a new one)
        self.lock_models: dict[int, Optional[str]] = {}
        self.checks: list[Check] = []
        self.integrity_depth = 0
        self.params: dict[str, Entity] = {}
        self.param_order: list[str] = []
        self.param_writes: dict[str, tuple] = {}
        self.rmw_getters: dict[str, tuple] = {}
        self.inherited_rmw: dict[str, tuple] = {}
        self.deferred: list[tuple[Finding, str]] = []
        self.call_sites: list[CallSite] = []
        self.reported_write_lines: set[int] = set()
        #: compare-and-set writes seen (rules/claim.py), judged when the walk has ended
        self.claims: list[tuple] = []
        #: write lines reported at high confidence (a claim there is not reported again)
        self.sure_write_lines: set[int] = set()
        #: lines of every write and insert: what a double claim would do twice
        self.work_lines: list[int] = []
        #: unguarded inserts (line, model): a caller's check may be what they depend on
        self.creates: list[tuple[int, Optional[str]]] = []
        #: (line, name): a row (or the rows a loop went over) handed to a call that is not
        #: logging, returned or yielded: work done with it
        self.handed_on: list[tuple[int, str]] = []
        #: loop variable -> the name of the rows it went over (``for t in rows``)
        self.loop_of: dict[str, str] = {}
        #: variables holding rows or ids a query selected by state (``rules/claim.py``)
        self.selections: dict[str, Selection] = dict(outer.selections) if outer else {}
        #: lines that write, insert or call a method of a row (what a lock protects)
        self.write_lines: list[int] = []
        self.is_method = is_method
        #: a loader's entity (Returned) or a lookup's answer (presence.Presence)
        self.returned: Optional[Returned] = None
        #: checks made in helpers, the get-or-create contract (presence.py)
        self.helper_checks = presence.State()
        #: conditions kept in names (``q |= Q(..)``) -> the columns they compare (conditions.py)
        self.conditions: dict[str, frozenset] = {}

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
                self.stack.append(scope)
        if self.name in self.mod.info.txn_targets:
            retrying = self.mod.info.txn_targets[self.name]
            ndb = "ndb" in self.mod.info.frameworks
            serializable = self.vocab.ndb_serializable if ndb else not self.vocab.weak_isolation
            label = self.mod.info.txn_runners.get(self.name, "a transaction runner")
            self.stack.append(Scope("txn", label, line, retrying=retrying,
                                    serializable=serializable, decorator=True,
                                    framework="ndb" if ndb else None))
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

    # -- statements
    def block(self, body) -> None:
        if isinstance(body, cst.SimpleStatementSuite):
            for small in body.body:
                self.small(small, body)
            return
        stmts = body.body if hasattr(body, "body") and not isinstance(body, (list, tuple)) else body
        for stmt in stmts:
            self.statement(stmt)

    def statement(self, stmt: cst.CSTNode) -> None:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                self.small(small, stmt)
        elif isinstance(stmt, cst.If):
            before = len(self.checks)
            self.test(stmt.test, stmt)
            made = self.checks[before:]
            for c in made:
                c.used = c.used or normalises(c, branches(stmt))
            if made and self.found_in_body(stmt.test):
                for c in made:
                    c.suspended = c.kind.missing_row
            if "in_atomic_block" in code_of(stmt.test) and exits(stmt.body):
                # ``if not connection.in_atomic_block: raise ...``: the caller's transaction
                self.stack.append(Scope("txn", "the caller's transaction (checked by "
                                        "`in_atomic_block`)", self.line(stmt)))
            self.block(stmt.body)
            for c in made:
                c.suspended = False
            before = conditions.snapshot(self)
            if stmt.orelse is not None:
                if isinstance(stmt.orelse, cst.If):
                    self.statement(stmt.orelse)
                else:
                    self.block(stmt.orelse.body)
                conditions.merge(self, before)      # a query either branch selected
            if made and not any(exits(b) for b in branches(stmt)):
                close_checks(made, branches(stmt))
        elif isinstance(stmt, cst.While):
            self.test(stmt.test, stmt)
            self.block(stmt.body)
            if stmt.orelse is not None:
                self.block(stmt.orelse.body)
        elif isinstance(stmt, cst.For):
            self.loop(stmt)
        elif isinstance(stmt, cst.With):
            self.with_(stmt)
        elif isinstance(stmt, cst.Try):
            self.try_(stmt)
        elif isinstance(stmt, cst.FunctionDef):
            self.nested(stmt)
        elif isinstance(stmt, cst.ClassDef):
            return
        else:
            for field in ("body", "orelse", "finalbody"):
                sub = getattr(stmt, field, None)
                if isinstance(sub, cst.BaseSuite):
                    self.block(sub)
            for case in getattr(stmt, "cases", ()) or ():
                self.block(case.body)

    def nested(self, node: cst.FunctionDef) -> None:
        inner = FunctionAnalyzer(self.mod, node, self.positions, self.offset,
                                 self.qualname + "." + node.name.value, False, outer=self)
        inner.run()
        self.mod.nested_seen += 1

    def small(self, small: cst.CSTNode, stmt: cst.CSTNode) -> None:
        if isinstance(small, cst.Assign):
            self.assign(small.targets, small.value, small)
        elif isinstance(small, cst.AnnAssign):
            if small.value is not None:
                self.assign([cst.AssignTarget(small.target)], small.value, small)
        elif isinstance(small, cst.AugAssign):
            self.aug_assign(small)
        else:
            self.calls_in(small)
            out = small.value if isinstance(small, cst.Return) else \
                small.value.value if isinstance(small, cst.Expr) and isinstance(small.value, cst.Yield) else None
            if out is not None and self.claims:     # a claimed row returned or yielded is handed on
                line = self.line(small)
                self.handed_on.extend((line, n) for n in names_in(out)
                                      if n in self.entities or n in self.querysets)
            if isinstance(small, cst.Return) and small.value is not None and \
                    self.returned is None and self.outer is None:
                self.return_(small.value)

    def return_(self, value: cst.BaseExpression) -> None:
        """Remember the first entity this function reads and returns (for its callers)."""
        while isinstance(value, cst.Await):
            value = value.expression
        if presence.note_return(self, value):
            return
        if isinstance(value, cst.Call):
            info = self.classify_get(value)
            if info is not None:
                self.returned = Returned(info, tuple(self.stack), self.line(value),
                                         bool(info.model and info.model in self.mod.info.versioned),
                                         self.mod.policy_of(info.model))
                return
            got = self.from_helper(value)
            if got is not None:
                ret = got[0]
                self.returned = Returned(ret.info, tuple(self.stack) + ret.scopes, self.line(value),
                                         ret.versioned, ret.policy)
        elif isinstance(value, cst.Name) and value.value in self.entities:
            ent = self.entities[value.value]
            if ent.source in ("get", "call"):
                info = GetInfo(ent.model, ent.getter, ent.key, ent.framework,
                               for_update=ent.for_update, locked=ent.locked_read,
                               maybe_none=ent.maybe_none)
                self.returned = Returned(info, ent.scopes, ent.read_line, ent.versioned,
                                         ent.policy)

    def from_helper(self, call: cst.Call) -> Optional[tuple]:
        """(Returned, helper name, its file if another module's) when ``call`` calls a
        function (of this module, or imported) that returns an entity it read."""
        func = call.func
        if isinstance(func, cst.Name):
            name, alias = func.value, None
        elif isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
            name, alias = func.attr.value, func.value.value
            if alias in ("self", "cls"):
                return self.mod.returned_by_method(self.qualname.split(".", 1)[0], name) or \
                    self.mod.returned_by_name(name)
            if alias in self.entities or (alias not in self.mod.info.imports and
                                          alias not in self.mod.module_aliases):
                return self.mod.returned_by_name(name)      # ``repo.find(...)``: any object
        elif isinstance(func, cst.Attribute):
            return self.mod.returned_by_name(func.attr.value)   # ``self.storage.find_zone(...)``
        else:
            return None
        return self.mod.returned_by(name, alias)

    def new_returned_entity(self, name: str, got: tuple, line: int) -> Entity:
        ret, helper, filename = got
        info = ret.info
        where = f"{filename} " if filename else ""
        via = f"`{helper}()` ({where}line {ret.line})"
        # the helper's own transactions and locks ended when it returned
        ended = tuple(dataclasses.replace(s, where=f"in `{helper}()`, {where}") for s in ret.scopes)
        ent = Entity(name, line, tuple(self.stack) + ended, "call", model=info.model,
                     getter=info.getter, key=info.key, framework=info.framework,
                     for_update=info.for_update and not ended,
                     locked_read=info.locked and not ended, maybe_none=info.maybe_none,
                     versioned=ret.versioned or bool(info.model and
                                                     info.model in self.mod.info.versioned),
                     via=via, policy=ret.policy or self.mod.policy_of(info.model))
        if ent.for_update:
            self.row_locks.append((line, self.in_txn()))
        self.entities[name] = ent
        self.taint.pop(name, None)
        self.params.pop(name, None)
        self.new_objects.pop(name, None)
        self.querysets.pop(name, None)
        return ent

    # -- expressions
    def calls_in(self, node: cst.CSTNode, skip: Optional[cst.Call] = None) -> None:
        for call in iter_calls(node):
            if call is not skip:
                self.call(call)

    def classify_get(self, call: cst.Call) -> Optional[GetInfo]:
        term = terminal(call)
        if not term:
            return None
        names, calls, root = chain(call)
        name = dotted(call.func)
        v = self.vocab
        for_update = any(terminal(c) in ("select_for_update", "with_for_update") for c in calls)
        if not for_update:
            for c in calls:
                for a in c.args:
                    if isinstance(a.value, cst.Call) and "with_for_update" in dotted(a.value.func) \
                            or (a.keyword is not None and a.keyword.value == "with_for_update"):
                        for_update = True
        if not for_update:
            # session.execute(select(M).with_for_update())
            for c in calls:
                for a in c.args:
                    if isinstance(a.value, cst.Call):
                        if any(terminal(cc) == "with_for_update" for cc in chain(a.value)[1]):
                            for_update = True

        typed_name = None

        def mk(model, getter, fw, maybe_none=False, locked=False):
            key = code_of(call)
            key = re.sub(r"\.(select_for_update|with_for_update)\([^()]*\)", "", key)
            session = None
            if fw == "sqlalchemy":
                for n in names[:-1]:
                    if "session" in n.lower() or n in self.sessions:
                        session = n
                        break
                session = session or typed_name
            if session:
                key = key.replace(session + ".", "<session>.", 1)
            info = GetInfo(model, getter or model or name, key, fw, for_update=for_update,
                           locked=locked, maybe_none=maybe_none)
            info.session = session
            info.lookup = lookup_columns(call)
            info.state = state_columns(call)
            return info

        if term == "fetch_under_lock" or name_matches(name, {"fetch_under_lock"}):
            inner = call.args[0].value if call.args else None
            model = None
            if isinstance(inner, cst.Name) and inner.value in self.entities:
                model = self.entities[inner.value].model
            return mk(model, "fetch_under_lock", None, locked=True)
        root_name = root.value if isinstance(root, cst.Name) else ""
        if term == "get_object_or_404":
            return mk(first_arg_name(call), None, "django")
        if term == "get_object" and root_name == "self" and len(names) == 2 and \
                "django" in self.mod.info.frameworks | set(self.vocab.frameworks):
            # a class-based view's (or DRF view's) row: read by get_object(), usually in
            # dispatch()/get_context_data() before the handler that writes it
            return mk(self.mod.info.class_model(self.qualname.split(".", 1)[0]), "self.get_object", "django")
        if term in DJANGO_GET_TERMINALS and "get_queryset" in names and root_name == "self":
            return mk(self.mod.info.class_model(self.qualname.split(".", 1)[0]), None, "django",
                      maybe_none=term in ("first", "last"))
        if root_name in self.querysets and self.querysets[root_name].framework == "sqlalchemy":
            return sqla_queries.run(self.querysets[root_name], term, mk)   # ``query.one()``
        if self.manager_chain(names) or (root_name in self.querysets and len(names) >= 2):
            if term in DJANGO_GET_TERMINALS or term in ("get_or_404",):
                base = self.querysets.get(root_name)
                if base is not None and base.for_update:
                    for_update = True
                model = root_name if is_model_name(root_name) else (base.model if base else None)
                return mk(model, None, "django", maybe_none=term in ("first", "last"))
            return None
        # SQLAlchemy
        recv = names[:-1]
        sessionish = any("session" in n.lower() for n in recv) or (root_name in self.sessions)
        if not sessionish and term in SQLA_TERMINALS:
            typed = receiver_prefix(call)
            if self.typed_session(typed):
                sessionish = True
                typed_name = dotted(typed)
        if term == "get" and (sessionish or root_name in ("db",)) and first_arg_name(call) \
                and is_model_name(first_arg_name(call) or "") and len(call.args) >= 2:
            return mk(first_arg_name(call), None, "sqlalchemy", maybe_none=True)
        if term in ("get_or_404", "first_or_404", "one_or_404") and root_name == "db":
            return mk(first_arg_name(call), None, "sqlalchemy")
        if term in SQLA_TERMINALS:
            sel_model = None
            for c in calls:
                t = terminal(c)
                if t in ("query",) and (sessionish or "query" in names):
                    sel_model = first_arg_name(c) or sel_model
                if t in ("execute", "scalars", "scalar"):
                    for a in c.args:
                        if isinstance(a.value, cst.Call):
                            for cc in chain(a.value)[1]:
                                if terminal(cc) == "select":
                                    sel_model = first_arg_name(cc) or sel_model
            if "query" in names and is_model_name(root_name) and sel_model is None:
                sel_model = root_name          # Flask-SQLAlchemy Model.query.get()
            if sel_model or (term != "get" and sessionish and
                             any(terminal(c) in ("execute", "scalars", "scalar", "query")
                                 for c in calls)):
                return mk(sel_model, None, "sqlalchemy", maybe_none=term in MAYBE_NONE)
        # App Engine
        if term == "get" and (names[-2:-1] == ["key"] or
                              any(terminal(c) == "Key" for c in calls[1:])):
            model = None
            for c in calls[1:]:
                if terminal(c) == "Key":
                    model = first_arg_name(c)
            return mk(model, None, "ndb", maybe_none=True)
        if term == "get" and root_name == "db" and len(names) == 2:
            return mk(None, "db.get", "ndb", maybe_none=True)
        owner = names[-2] if len(names) >= 2 else ""      # ``pkg.objects.Backup.get_by_id(...)``
        if term in ("get_by_id", "get_by_key_name", "get_or_insert") and is_model_name(owner):
            return mk(owner, None, "ndb" if "ndb" in self.mod.info.frameworks or owner == root_name else None,
                      maybe_none=term != "get_or_insert")
        if name_matches(name, v.gets):
            model = root_name if is_model_name(root_name) else None
            return mk(model, name, None, maybe_none=True)
        if term.startswith("get_") and is_model_name(root_name) and len(names) == 2:
            return mk(root_name, None, None, maybe_none=True)
        if term.startswith("get_") and len(names) == 3 and is_model_name(names[1]) and \
                root_name in self.mod.info.imports:      # ``network_obj.Segment.get_objects(..)``
            return mk(names[1], None, None, maybe_none=True)
        return None

    def record_get(self, call: cst.Call, info: GetInfo) -> None:
        line = self.line(call)
        if info.for_update:
            txn = self.in_txn()
            if txn is None and info.framework == "django" and not info.locked:
                self.report(call, "TXN108", deferrable=True, message=txn108.message(line))
            self.row_locks.append((line, txn))
            self.lock_models[line] = info.model
        elif info.locked:
            self.row_locks.append((line, None))

    def new_entity(self, name: str, info: GetInfo, line: int, source: str = "get") -> Entity:
        ent = Entity(name, line, tuple(self.stack), source, model=info.model, getter=info.getter,
                     key=info.key, framework=info.framework, for_update=info.for_update,
                     locked_read=info.locked, maybe_none=info.maybe_none,
                     versioned=bool(info.model and info.model in self.mod.info.versioned),
                     session=getattr(info, "session", None), policy=self.mod.policy_of(info.model),
                     lookup=info.lookup, state=info.state)
        self.entities[name] = ent
        self.taint.pop(name, None)
        self.params.pop(name, None)
        self.types[name] = ""
        return ent

    def assign(self, targets, value: cst.BaseExpression, node: cst.CSTNode) -> None:
        line = self.line(node)
        while isinstance(value, cst.Await):
            value = value.expression
        self.note_selection(targets, value, line)
        conditions.note_assign(self, targets, value)        # ``q = Q(...)``
        kept = request_row(value)
        if kept is not None and all(isinstance(t.target, cst.Name) for t in targets):
            # a row an earlier step (middleware, dispatch) read and kept on the request
            for t in targets:
                self.new_entity(t.target.value, GetInfo(None, None, None, self.framework_hint()), line,
                                source="call").via = f"an earlier step (kept on `{kept}`)"
            return
        info = self.classify_get(value) if isinstance(value, cst.Call) else None
        if info is not None and self.aggregate_kind(value):
            info = None                 # ``session.execute(select(func.max(..))).scalar()``: a number
        if info is not None:
            self.record_get(value, info)
            for t in targets:
                tgt = t.target
                if isinstance(tgt, (cst.Tuple, cst.List)) and tgt.elements:
                    tgt = tgt.elements[0].value
                if isinstance(tgt, cst.Name):
                    self.new_entity(tgt.value, info, line)
            for a in value.args:
                self.calls_in(a.value)
            return
        got = self.from_helper(value) if isinstance(value, cst.Call) else None
        if got is not None and presence.note_assigned(self, targets, value, got):
            got = None                  # a lookup's answer, not a row: a check kept in a name
        if got is not None and all(isinstance(t.target, cst.Name) for t in targets):
            self.calls_in(value)
            for t in targets:
                self.new_returned_entity(t.target.value, got, line)
            return
        # querysets (not evaluated yet), and SQLAlchemy's lists of rows
        qs_set: set[str] = set()
        rows = self.sqla_rows(value)
        if rows is not None:
            for t in targets:
                if isinstance(t.target, cst.Name):
                    self.querysets[t.target.value] = rows
                    qs_set.add(t.target.value)
        kept_query = sqla_queries.note_kept(self, targets, value)     # ``query = session.query(M)``
        qs_set |= kept_query
        if not kept_query and (isinstance(value, (cst.Call, cst.Attribute)) or is_slice(value)):
            names, calls, root = chain(value)
            lazy = terminal(value) not in ("count", "exists", "create", "update", "delete", "aggregate") \
                if isinstance(value, cst.Call) else True
            base = self.querysets.get(root.value) if isinstance(root, cst.Name) else None
            if base is None and isinstance(root, cst.Name) and root.value == "self" and len(names) >= 3 \
                    and self.is_method:
                # ``self.get_connection().filter(..)``: a method of the class hands out a manager
                model = self.mod.self_reads.manager_model(self.qualname.split(".", 1)[0], names[1])
                base = GetInfo(model, model, None, "django") if model else None
            if (self.manager_chain(names) or (base is not None and len(names) >= 2)) and lazy:
                # ``qs = M.objects.filter(..)``, and ``qs = qs.select_for_update()`` (even on one
                # branch: the rows are read FOR UPDATE where it matters)
                fu = any(terminal(c) == "select_for_update" for c in calls) or \
                    (base is not None and base.for_update)
                model = base.model if base is not None else \
                    (root.value if isinstance(root, cst.Name) and is_model_name(root.value) else None)
                state = state_columns(value) | (base.state if base is not None else frozenset()) | \
                    conditions.named_state(self, value)             # ``filter(q)``
                for t in targets:
                    if isinstance(t.target, cst.Name):
                        qs = self.querysets[t.target.value] = GetInfo(model, model, None, "django",
                                                                      for_update=fu)
                        qs.state = state
                        qs_set.add(t.target.value)
        self.calls_in(value)
        # a check kept in a variable: ``exists = M.objects.filter(..).exists()``
        check = self.check_kind(value)
        self.note_aggregate(targets, value, line)
        for t in targets:
            tgt = t.target
            if isinstance(tgt, cst.Name):
                n = tgt.value
                if check:
                    self.check_vars[n] = check + (models_in(value),)
                    self.check_keys[n] = names_in(value)
                    self.check_lookups[n] = self.lookup_of(value)
                if isinstance(value, cst.Name) and value.value in self.entities:
                    self.entities[n] = self.entities[value.value]          # alias
                    continue
                if n in self.entities and isinstance(value, cst.Name) and value.value == "None" and \
                        presence.none_on_miss(self, n):
                    continue        # ``else: found = None``: the lookup's miss, on another branch
                if n in self.entities:
                    del self.entities[n]
                if n not in qs_set:
                    self.querysets.pop(n, None)
                srcs = self.sources(value)
                if srcs:
                    self.taint[n] = srcs
                else:
                    self.taint.pop(n, None)
                fields = self.fields_read(value)
                if fields:
                    self.field_taint[n] = fields
                else:
                    self.field_taint.pop(n, None)
                made = self.constructed(value)
                if made is not None:
                    self.new_objects[n] = made
                else:
                    self.new_objects.pop(n, None)
                if isinstance(value, cst.Call) and "session" in dotted(value.func).lower():
                    self.sessions.add(n)
                self.note_local(n, value)
            elif isinstance(tgt, cst.Attribute) and self.copied_as_new(tgt, value):
                continue
            elif isinstance(tgt, cst.Attribute):
                self.stored_aggregate(tgt, value, line)
                self.mutate_attr(tgt, value, line)
            elif isinstance(tgt, cst.Subscript):
                base = tgt.value
                if isinstance(base, cst.Attribute) and isinstance(base.value, cst.Name) and \
                        base.value.value in self.entities:
                    # ``x.settings[k] = v`` changes the column's old value in place
                    self.entities[base.value.value].pending.append(
                        Mutation(line, base.attr.value, "derived", own=True))

    def sources(self, expr: cst.CSTNode) -> set:
        out: set = set()
        for n in names_in(expr):
            if n in self.entities:
                out.add(self.entities[n])
            elif n in self.taint:
                out |= self.taint[n]
        return out

    def copied_as_new(self, tgt: cst.Attribute, value: cst.BaseExpression) -> bool:
        """``x.pk = None`` (``x.id = None``, ``x._state.adding = True``): Django's way to copy a
        row; the next ``save()`` inserts a new one, so ``x`` is a new object, not a read row."""
        base = tgt.value
        if isinstance(base, cst.Attribute) and base.attr.value == "_state" and tgt.attr.value == "adding":
            base, fresh = base.value, isinstance(value, cst.Name) and value.value == "True"
        else:
            fresh = tgt.attr.value in ("pk", "id") and isinstance(value, cst.Name) and value.value == "None"
        if not fresh or not isinstance(base, cst.Name) or base.value not in self.entities:
            return False
        ent = self.entities.pop(base.value)
        self.new_objects[base.value] = ent.model or "object"
        return True

    def mutate_attr(self, tgt: cst.Attribute, value: cst.BaseExpression, line: int) -> None:
        if isinstance(tgt.value, cst.Name):
            ent = self.entities.get(tgt.value.value)
        else:
            ent = self.relation_entity(tgt.value)       # ``order.user.plan.expire = ...``
        if ent is None:
            return
        attr = tgt.attr.value
        kind = "blind"
        if self.atomic_expr(value):
            kind = "atomic"
        elif isinstance(value, cst.BinaryOperation) and isinstance(value.operator, (cst.Add, cst.Subtract)) \
                and any(isinstance(side, cst.Attribute) and side.attr.value == attr and
                        isinstance(side.value, cst.Name) and side.value.value == tgt.value.value
                        for side in (value.left, value.right)):
            # ``x.n = x.n + 1`` is a counter; ``x.s = x.s + "suffix"`` a derived string
            kind = "derived" if non_numeric(value.left) or non_numeric(value.right) else "counter"
        elif ent in self.sources(value) and not self.identity_value(value, ent):
            kind = "derived"
        reads = {f for n, f in self.fields_read(value) if n == ent.name}
        if ent.source == "self" and ent.name == "self":
            # ``self.expire = self.extended_until(plan)``: what the method reads of the row
            reads = self.mod.self_reads.expand(self.qualname.split(".", 1)[0], reads)
        own = attr in reads
        if own and kind == "blind":
            kind = "derived"
        ent.pending.append(Mutation(line, attr, kind, own=own, constant=is_constant(value),
                                    reads=frozenset(reads)))

    def identity_value(self, value: cst.CSTNode, ent: Entity) -> bool:
        """``f"deleted-{user.pk}"``: made from the row's primary key alone (and from
        nothing a local took from the row), so the read decided nothing of it."""
        names = names_in(value)
        if any(ent in self.taint.get(n, ()) for n in names):
            return False
        return all(identity_only(value, n) for n in names
                   if n in self.entities and self.entities[n] is ent)

    def fields_read(self, expr: cst.CSTNode) -> set:
        """The (entity name, field) pairs ``expr`` is made from, directly (``x.due``) or
        through locals (``d = x.due.date()``, then ``d + 1``)."""
        out: set = set()
        for n in walk_nodes(expr):
            if isinstance(n, cst.Attribute) and isinstance(n.value, cst.Name) and \
                    n.value.value in self.entities:
                out.add((n.value.value, n.attr.value))
            elif isinstance(n, cst.Name) and n.value in self.field_taint:
                out |= self.field_taint[n.value]
        return out

    def atomic_expr(self, value: cst.CSTNode) -> bool:
        for call in iter_calls(value):
            if dotted(call.func).rsplit(".", 1)[-1] == "F":
                return True
        stack = [value]
        while stack:
            n = stack.pop()
            if isinstance(n, cst.Attribute) and isinstance(n.value, cst.Name) and \
                    is_model_name(n.value.value) and n.value.value not in self.entities:
                return True
            stack.extend(kids(n))
        return False

    def aug_assign(self, node: cst.AugAssign) -> None:
        line = self.line(node)
        self.calls_in(node.value)
        conditions.note_aug(self, node)                  # ``q |= Q(...)``
        tgt = node.target
        if isinstance(tgt, cst.Attribute) and isinstance(tgt.value, cst.Name):
            ent = self.entities.get(tgt.value.value)
            if ent is not None:
                kind = "counter" if isinstance(node.operator, (cst.AddAssign, cst.SubtractAssign)) \
                    and not non_numeric(node.value) else "derived"
                if self.atomic_expr(node.value):
                    kind = "atomic"
                ent.pending.append(Mutation(line, tgt.attr.value, kind, own=True))
        elif isinstance(tgt, cst.Subscript) and isinstance(tgt.value, cst.Attribute) and \
                isinstance(tgt.value.value, cst.Name) and tgt.value.value.value in self.entities:
            self.entities[tgt.value.value.value].pending.append(
                Mutation(line, tgt.value.attr.value, "derived", own=True))

    # -- calls
    def call(self, call: cst.Call) -> None:
        term = terminal(call)
        if not term:
            return
        name = dotted(call.func)
        func = call.func
        recv = func.value if isinstance(func, cst.Attribute) else None
        recv_name = recv.value if isinstance(recv, cst.Name) else None
        v = self.vocab
        line = None
        if term in ("update", "values") and self.selections:
            self.update_claim(call)
        if self.claims:             # work done with a row counts only after its claim
            self.note_handed_on(call, name)
        if recv_name is None and recv is not None and self.relation_entity(recv) is not None:
            recv_name = dotted(recv)        # ``order.user.plan.save()``: a related row

        # an evaluated select_for_update()/with_for_update() read that is not assigned
        if term in DJANGO_GET_TERMINALS | SQLA_TERMINALS or term == "get_object_or_404":
            info = self.classify_get(call)
            if info is not None and (info.for_update or info.locked):
                self.record_get(call, info)

        # side effects (TXN107)
        if name_matches(name, v.side_effects) and not self.is_write_name(term) and \
                not self.transactional_task(call):
            txn = self.in_txn()
            if txn is not None and (txn.retrying or self.mod.cfg.side_effects_in_any_transaction):
                line = self.line(call)
                why = ("can be retried, so it may run several times" if txn.retrying
                       else "can roll back after it ran")
                self.report(call, "TXN107", (
                    f"TXN107 retry side effect: `{name}()` at line {line} runs inside "
                    f"`{txn.label}` (line {txn.line}), which {why}; move it after the transaction, "
                    f"into transaction.on_commit(), or make it a transactional task"))

        # entity re-reads
        if term == "refresh_from_db" and recv_name in self.entities:
            old = self.entities[recv_name]
            ent = self.new_entity(recv_name, GetInfo(old.model, old.getter, old.key, old.framework),
                                  self.line(call))
            ent.source = "get"
            ent.policy = ent.policy or old.policy
            if "." in recv_name and any(txn is not None and id(txn) in self.stack_ids()
                                        for _l, txn in self.row_locks):
                ent.for_update = True       # re-read after this transaction locked the rows
            return
        if term == "refresh" and recv is not None and "session" in dotted(recv).lower() and call.args:
            target = call.args[0].value
            if isinstance(target, cst.Name) and target.value in self.entities:
                old = self.entities[target.value]
                fu = kwarg(call, "with_for_update") is not None
                info = GetInfo(old.model, old.getter, old.key, "sqlalchemy", for_update=fu)
                ent = self.new_entity(target.value, info, self.line(call))
                ent.policy = ent.policy or old.policy
                if fu:
                    self.row_locks.append((self.line(call), self.in_txn()))
                return

        # writes
        if term == "save" and call.args and call.args[0].keyword is None and \
                self.new_objects.get(code_of(call.args[0].value)):
            self.stores_new_object(call)    # ``self.save(datum)``: a repository's insert
            return
        if recv_name in self.entities and term in ("save", "put", "put_async") or \
                (recv_name in self.entities and name_matches(term, v.puts) and term != "put_multi"):
            ent = self.entities[recv_name]
            if term == "save":
                fields = self.update_fields(call)
                kind = "whole" if fields is False else "fields"
                self.write(ent, call, kind, None if fields in (False, True) else fields,
                           verb="saved")
            else:
                self.write(ent, call, "whole", None, verb="put")
            self.act(call, f"`{recv_name}.{term}()`", ent.model, "save", entity=ent)
            return
        if term in ("put", "put_multi", "put_async", "put_multi_async") and recv_name in ("db", "ndb") \
                and call.args:
            arg = call.args[0].value
            items = [e.value for e in arg.elements] if isinstance(arg, (cst.List, cst.Tuple)) else [arg]
            for it in items:
                if isinstance(it, cst.Name) and it.value in self.entities:
                    self.write(self.entities[it.value], call, "whole", None, verb="put")
            self.act(call, f"`{name}()`", None, "save")
            return
        if term in ("commit", "flush") and recv is not None and self.is_session(recv):
            self.flush_all(call, verb=f"flushed by `{code_of(func)}()`", session=dotted(recv))
            if term == "commit":
                self.release_row_locks(self.line(call))
            return
        if term in ("save", "put", "create") and recv_name in self.new_objects:
            made = self.new_objects[recv_name]
            # a form's or serializer's save() inserts a row of a model it does not name
            model = None if made.endswith(_FORM_CLASSES) or made == "object" else made
            self.act(call, f"`{recv_name}.{term}()` of a new object", model, "create")
            return
        if term in ("save", "put") and isinstance(recv, cst.Call) and \
                is_model_name(dotted(recv.func).rsplit(".", 1)[-1]):
            self.act(call, f"`{dotted(recv.func)}(...).{term}()`",
                     dotted(recv.func).rsplit(".", 1)[-1], "create")
            return
        if term in ("add", "add_all") and recv is not None and self.is_session(recv):
            model = None
            if call.args:
                arg = call.args[0].value
                if term == "add" and isinstance(arg, cst.Name) and arg.value in self.entities:
                    # an entity read earlier joins this session: its changes flush with it
                    self.entities[arg.value].session = dotted(recv)
                    return
                if isinstance(arg, cst.Call):
                    model = dotted(arg.func).rsplit(".", 1)[-1]
                elif isinstance(arg, cst.Name):
                    model = self.new_objects.get(arg.value)
            self.act(call, f"`{code_of(func)}()`", model, "create")
            return
        if term in ("create", "bulk_create") and (self.manager_chain(chain(call)[0]) or (
                isinstance(chain(call)[2], cst.Name) and chain(call)[2].value in self.querysets)):
            if kwarg(call, "ignore_conflicts") is None and kwarg(call, "update_conflicts") is None:
                root = chain(call)[2]
                self.act(call, f"`{label(call.func)}()`",
                         root.value if isinstance(root, cst.Name) else None, "create")
            return
        if term == "update" and (self.manager_chain(chain(call)[0]) or
                                 (chain(call)[2] is not None and
                                  isinstance(chain(call)[2], cst.Name) and
                                  chain(call)[2].value in self.querysets)):
            root = chain(call)[2]
            model = root.value if isinstance(root, cst.Name) else None
            if model in self.querysets:
                model = self.querysets[model].model
            self.act(call, f"`{label(call.func)}()`", model, "update")
            return
        if term == "delete" and _PICKED.intersection(chain(call)[0]) and self.manager_chain(chain(call)[0]):
            # ``M.objects.order_by("t").first().delete()``: pruning to a limit is an act
            root = chain(call)[2]
            self.act(call, f"`{label(call.func)}()`",
                     root.value if isinstance(root, cst.Name) and is_model_name(root.value) else None,
                     "delete")
            return
        if term in ("execute",) and call.args and isinstance(call.args[0].value, cst.Call):
            inner = call.args[0].value
            inner_names = [terminal(c) for c in chain(inner)[1]]
            if inner_names and inner_names[-1] in ("insert", "update") and not any(
                    t.startswith("on_conflict") or t == "prefix_with" for t in inner_names):
                stmt = [c for c in chain(inner)[1] if terminal(c) in ("insert", "update")][-1]
                self.act(call, f"`{dotted(inner.func)}`", first_arg_name(stmt),
                         "create" if terminal(stmt) == "insert" else "update")
            return
        if term == "setattr" and len(call.args) >= 2:
            tgt = call.args[0].value
            if isinstance(tgt, cst.Name) and tgt.value in self.entities:
                attr = call.args[1].value
                aname = attr.value.strip("'\"") if isinstance(attr, cst.SimpleString) else "?"
                kind = "derived" if len(call.args) > 2 and \
                    self.entities[tgt.value] in self.sources(call.args[2].value) else "blind"
                self.entities[tgt.value].pending.append(Mutation(self.line(call), aname, kind))
            return
        # in-place mutation of a field: ``x.tags.append(t)``
        if term in MUTATING_METHODS and isinstance(recv, cst.Attribute) and \
                isinstance(recv.value, cst.Name) and recv.value.value in self.entities:
            ent = self.entities[recv.value.value]
            if relation_change(self.mod.cfg.relations, ent.model, recv.attr.value, call,
                               self.new_objects):
                return          # rows of another table (a link, a child), not a column
            ent.pending.append(
                Mutation(self.line(call), recv.attr.value, "derived", own=True))
            return
        if _STORING.match(term) and isinstance(func, cst.Attribute):
            self.stores_new_object(call)
        # calls to functions of this module (resolved after all functions are seen), and
        # methods called on a row (``order.user.plan.extend()`` too)
        if isinstance(func, cst.Name) or (recv_name is not None):
            self.record_call_site(call, term, recv_name)

    @staticmethod
    def transactional_task(call: cst.Call) -> bool:
        for key in ("transactional", "_transactional"):
            v = kwarg(call, key)
            if isinstance(v, cst.Name) and v.value == "True":
                return True
        return False

    def is_write_name(self, term: str) -> bool:
        return term in ("save", "put")

    def is_session(self, recv: cst.BaseExpression) -> bool:
        d = dotted(recv)
        return "session" in d.lower() or d in self.sessions or d.split(".")[0] in self.sessions \
            or self.typed_session(recv)

    def update_fields(self, call: cst.Call):
        """False: no update_fields; True: given but not literal; else the set of names."""
        v = kwarg(call, "update_fields")
        if v is None:
            return False
        if isinstance(v, (cst.List, cst.Tuple, cst.Set)):
            out = set()
            for el in v.elements:
                if isinstance(el.value, cst.SimpleString):
                    out.add(el.value.value.strip("'\""))
                else:
                    return True
            return out
        return True

    def relation_entity(self, expr: cst.BaseExpression) -> Optional[Entity]:
        """``x.a.b`` where ``x`` is a row read here (or ``self`` of a model method): the related
        row, loaded with ``x`` (``select_related``) or lazily on first access; either way no
        earlier than ``x`` and under no more protection, so it takes ``x``'s read."""
        if not isinstance(expr, cst.Attribute):
            return None
        path = dotted(expr)
        if not path or path != code_of(expr):
            return None                     # calls or subscripts in the chain
        if path in self.entities:
            return self.entities[path]
        base = self.entities.get(path.split(".", 1)[0])
        if base is None or base.source == "param":
            return None
        ent = Entity(path, base.read_line, base.scopes, "self" if base.source == "self" else "get",
                     framework=base.framework, locked_read=base.locked_read, via=base.via,
                     state=conditions.joined(base, path))
        self.entities[path] = ent
        return ent

    def record_call_site(self, call: cst.Call, term: str, recv_name: Optional[str]) -> None:
        on_entity = recv_name in self.entities and recv_name not in ("self", "cls")
        if term not in self.mod.function_names and not on_entity:
            return              # ``x.method()`` on a row is kept: a model method may write it
        module_alias = None
        if recv_name is not None and recv_name not in ("self", "cls") and recv_name not in self.entities:
            if recv_name not in self.mod.module_aliases:
                return
            module_alias, recv_name = recv_name, None
        args = []
        for i, a in enumerate(call.args):
            if isinstance(a.value, cst.Name) and a.value.value in self.entities:
                key = a.keyword.value if a.keyword is not None else i
                args.append((key, self.entities[a.value.value]))
        receiver = self.entities.get(recv_name) if recv_name not in (None, "self", "cls") else None
        if receiver is not None and txn108.may_write(term):
            self.write_lines.append(self.line(call))      # ``row.method()`` may write the row
        live = [e for e in set(self.entities.values()) if e.source not in ("param", "self")]
        site = CallSite(term, self.line(call), self.col(call), tuple(self.stack), args, live,
                        self, receiver, module_alias)
        site.checks = tuple(dataclasses.replace(c) for c in self.checks if not c.used)
        site.on_self = recv_name == "self" and self.is_method
        site.guarded = self.integrity_depth > 0
        site.names = frozenset(names_in(call))
        self.mod.call_sites.append(site)

    # -- writes
    def write(self, ent: Entity, node: cst.CSTNode, kind: str, fields, verb: str,
              line: Optional[int] = None) -> None:
        w_line = line if line is not None else self.line(node)
        self.write_lines.append(w_line)
        relevant = ent.relevant(kind, fields)
        if ent.source == "self":
            # a model method that sets fields from arguments or other fields writes what the
            # caller asked for; one that derives a field from its own old value loses updates
            # (or one from another column written with it: ``original_state = state; state = x``)
            written_attrs = {m.attr for m in ent.pending} if fields is None else set(fields)
            relevant = [m for m in relevant if m.kind == "counter" or (m.kind == "derived" and (
                m.own or m.reads & (written_attrs - {m.attr})))]
            if relevant and ent.name == "self" and not any(s.kind for s in self.stack if not s.decorator):
                # callers that read the row are judged at their call (resolve_calls)
                self.param_writes.setdefault("self", (w_line, relevant, kind))
        written = [m for m in ent.pending if kind != "fields" or fields is None or m.attr in fields]
        found = claimed(ent, written, tuple(self.stack))
        if found is not None:
            self.claims.append((found, w_line, verb))
        self.work_lines.append(w_line)
        if kind == "fields" and fields is not None:
            ent.pending = [m for m in ent.pending if m.attr not in fields]
        else:
            ent.pending = []
        ent.writes.append(w_line)
        if not relevant:
            return
        ent.had_rmw = True
        self.check_internal(ent, w_line)
        if ent.source != "param" and ent.getter:
            self.rmw_getters.setdefault(ent.getter, (ent.read_line, w_line))
        stack = tuple(self.stack)
        if ent.source == "param":
            own = tuple(s for s in stack if not s.decorator and
                        not (self.outer and s in self.outer.stack))
            if not own:
                if ent.name in self.params and self.outer is None:
                    self.param_writes.setdefault(ent.name, (w_line, relevant, kind))
                return
            stack = own
        result = judge(ent, stack, relevant, self.vocab)
        if result is None:
            return
        code, detail = result
        msg = compose(code, ent, w_line, verb, relevant, detail, self.vocab)
        col = 0 if line is not None else self.col(node)
        # an unprotected helper is fine when every caller protects it: with a lock, for a
        # model that only a lock protects
        blind = all(m.kind == "blind" for m in relevant)     # a stale copy, nothing derived
        # ``save(update_fields=["image"])`` of a value made from *other* columns of the read
        # (a file name, a cart id): stale only if those columns change meanwhile
        # (a SQLAlchemy flush writes only the changed columns, as update_fields does)
        other_columns = kind in ("fields", "flush") and \
            all(m.kind == "derived" and not m.own for m in relevant)
        self.reported_write_lines.add(w_line)
        if not (blind or other_columns):
            self.sure_write_lines.add(w_line)
        self.report(w_line, code, msg, col=col, deferrable=code in ("TXN102", "TXN106")
                    and ent.source != "param", need=protection_needed(ent.policy),
                    confidence=Confidence.LOW if blind or other_columns else Confidence.HIGH)

    def check_internal(self, ent: Entity, w_line: int) -> None:
        """TXN103 in one function: two objects for the same row, both written."""
        if not ent.key:
            return
        for other in set(self.entities.values()):
            if other is ent or other.key != ent.key or not other.writes:
                continue
            if ent.framework == "sqlalchemy" and ent.session == other.session:
                continue     # the identity map hands out one object per row and session
            first_write = min(other.writes)
            if other.had_rmw and ent.read_line < first_write < w_line and other.read_line <= w_line:
                self.report(w_line, "TXN103", (
                    f"TXN103 internal: `{ent.name}` (read at line {ent.read_line}) and "
                    f"`{other.name}` (read at line {other.read_line}) are two objects for the same "
                    f"row; `{other.name}` is written at line {first_write}, then `{ent.name}` at "
                    f"line {w_line} overwrites that change; read the row once and reuse the object"))
                return

    def flush_all(self, node: cst.CSTNode, verb: str, line: Optional[int] = None,
                  session: Optional[str] = None) -> None:
        for ent in list({id(e): e for e in self.entities.values()}.values()):
            if not ent.pending:
                continue
            if session and ent.session and session.split(".")[-1] != ent.session.split(".")[-1]:
                continue
            if ent.framework in ("django", "ndb"):
                continue
            if ent.framework is None and ent.source == "param" and \
                    "sqlalchemy" not in self.mod.info.frameworks:
                continue
            self.write(ent, node, "flush", None, verb=verb, line=line)

    def release_row_locks(self, line: int) -> None:
        for ent in set(self.entities.values()):
            if ent.for_update and ent.released_line is None and ent.framework == "sqlalchemy":
                ent.released_line = line
        self.row_locks = [(ln, txn) for ln, txn in self.row_locks if txn is not None]

    # -- check-then-act (TXN105)
    def orm_query(self, call: cst.Call) -> bool:
        """Is ``call`` (an ``exists()`` / ``count()``) a database query, not a path or a list?"""
        if isinstance(call.func, cst.Name):
            return call.func.value in ("exists", "count")        # sqlalchemy exists()/func.count
        names, calls, root = chain(call)
        if any(n in ORM_MARKERS for n in names[:-1]):
            return True
        if isinstance(root, cst.Name) and root.value in self.querysets:
            return True
        return any(isinstance(a.value, cst.Call) and terminal(a.value) in ("select", "query")
                   for c in calls for a in c.args)

    def check_kind(self, expr: cst.CSTNode) -> Optional[tuple]:
        for call in iter_calls(expr):
            t = terminal(call)
            if t == "exists" and self.orm_query(call):
                return ("exists", "existence")
        while isinstance(expr, cst.UnaryOperation):
            expr = expr.expression
        if isinstance(expr, cst.BooleanOperation):      # ``if flag and 0 < LIMIT <= M.objects.count():``
            return self.check_kind(expr.left) or self.check_kind(expr.right)
        if isinstance(expr, cst.Comparison):
            for call in iter_calls(expr):
                t = terminal(call)
                if t == "count" and (self.orm_query(call) or dotted(call.func) == "func.count"):
                    return ("count", "a count")
                if t == "len" and isinstance(call.func, cst.Name) and call.args and \
                        isinstance(call.args[0].value, cst.Call) and \
                        self.orm_query(call.args[0].value):
                    return ("count", "a count")
        return None

    def aggregate_kind(self, expr: cst.CSTNode) -> Optional[str]:
        """``"a count"`` / ``"an aggregate"`` when ``expr`` reads one from the database."""
        for call in iter_calls(expr):
            t = terminal(call)
            if t == "count" and (self.orm_query(call) or dotted(call.func) == "func.count"):
                return "a count"
            if (t == "aggregate" and self.orm_query(call)) or dotted(call.func) in ("func.max", "func.count"):
                return "an aggregate"
        return None

    def stored_aggregate(self, tgt: cst.Attribute, value: cst.BaseExpression, line: int) -> None:
        """``self.number = last + 1`` in a model method (``clean()``, ``save()``): the value the
        row will be saved with comes from an aggregate read just before (TXN105); the save
        is the caller's, so the walk reports where the value is stored."""
        ent = self.entities.get(tgt.value.value) if isinstance(tgt.value, cst.Name) else None
        if ent is None or ent.source != "self":
            return
        used = names_in(value)
        for check in self.checks:
            if check.kind is CheckKind.AGGREGATE and not check.used and check.names & used and \
                    not (check.locked and {id(x) for x in check.stack} <= self.stack_ids()):
                check.used = True
                self.report(tgt, "TXN105", stored_aggregate_message(check, f"self.{tgt.attr.value}", line))
                return

    def note_aggregate(self, targets, value: cst.BaseExpression, line: int) -> None:
        """Aggregate-then-insert: ``n = M.objects.filter(..).count()`` (or ``Max``) and then
        an insert that uses ``n`` (``number=n + 1``): two requests compute the same value."""
        names = [t.target.value for t in targets if isinstance(t.target, cst.Name)]
        if not names:
            return
        used = names_in(value)
        for c in self.checks:
            if c.kind == "aggregate" and not c.used and c.names & used:
                c.names.update(names)         # ``number = last + 1`` carries the value on
                return
        what = self.aggregate_kind(value)
        if what is None:
            return
        check = Check(line, CheckKind.AGGREGATE, f"`{names[0]}` computed from {what}", tuple(self.stack),
                      self.protected_now(), models_in(value))
        check.names.update(names)
        self.checks.append(check)

    def test(self, test: cst.BaseExpression, node: cst.CSTNode) -> None:
        self.calls_in(test)
        line = self.line(node)
        found = self.check_kind(test)
        if found is None:
            for n in names_in(test):
                if n in self.check_vars:
                    found = self.check_vars[n]
                    break
        if found is None:
            used = names_in(test)
            for c in self.checks:
                if c.kind == "aggregate" and c.names & used:
                    found = ("count", f"{c.what} (line {c.line})", c.models)   # ``if not used:``
                    break
        if found is None:
            found = presence.call_check(self, test)     # ``if not has_vote(user, poll):``
        if found is None:
            found = self.entity_check(test)
        if found is not None:
            kind, what = found[0], found[1]
            models = found[2] if len(found) > 2 else models_in(test)
            check = Check(line, CheckKind(kind), what, tuple(self.stack),
                          self.protected_now(models if CheckKind(kind).missing_row else frozenset()),
                          models, found[3] if len(found) > 3 else None,
                          column=found[4] if len(found) > 4 else None)
            check.keys = names_in(test).union(*(self.check_keys.get(n, ()) for n in names_in(test)))
            check.lookup = self.lookup_of(test)
            self.checks.append(check)

    def found_in_body(self, test: cst.BaseExpression) -> bool:
        """Whether the ``if`` body is the branch where the checked row exists: ``if
        q.exists():``, ``if obj:``, ``if obj is not None:`` (not ``if not ...`` or ``is None``)."""
        stack: list[tuple[cst.CSTNode, bool]] = [(test, False)]
        while stack:
            node, negated = stack.pop()
            if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not):
                stack.append((node.expression, not negated))
            elif isinstance(node, cst.BooleanOperation):
                stack.extend([(node.left, negated), (node.right, negated)])
            elif isinstance(node, cst.Comparison) and len(node.comparisons) == 1 and \
                    isinstance(node.comparisons[0].comparator, cst.Name) and \
                    node.comparisons[0].comparator.value == "None":
                is_none = isinstance(node.comparisons[0].operator, cst.Is)
                stack.append((node.left, negated ^ is_none))
            elif isinstance(node, cst.Call) and (terminal(node) == "exists" or
                                                 self.classify_get(node) is not None):
                return not negated
            elif isinstance(node, cst.Name) and node.value in self.entities or presence.found_test(self, node):
                return not negated
        return False

    def lookup_of(self, expr: cst.BaseExpression) -> Optional[frozenset]:
        """The columns the lookup behind a check compared (None: not known)."""
        for call in iter_calls(expr):
            found = lookup_columns(call)
            if found:
                return found
        for n in names_in(expr):
            if n in self.check_lookups:
                return self.check_lookups[n]
            ent = self.entities.get(n)
            if ent is not None and ent.lookup:
                return ent.lookup
        return None

    def entity_check(self, test: cst.BaseExpression) -> Optional[tuple]:
        stack = [test]
        while stack:
            n = stack.pop()
            if isinstance(n, cst.Comparison):
                left = n.left
                for ct in n.comparisons:
                    op = ct.operator
                    right = ct.comparator
                    if isinstance(op, (cst.Is, cst.IsNot)) and isinstance(right, cst.Name) and \
                            right.value == "None":
                        if isinstance(left, cst.Name) and left.value in self.entities and \
                                self.entities[left.value].maybe_none:
                            return ("none", f"`{left.value} is None`",
                                    maybe_models(self.entities[left.value].model))
                        if isinstance(left, cst.Call) and self.classify_get(left) is not None:
                            return ("none", "a missing row", maybe_models(self.classify_get(left).model))
                    if isinstance(op, (cst.LessThan, cst.LessThanEqual, cst.GreaterThan,
                                       cst.GreaterThanEqual)):
                        for side in (left, right):
                            if isinstance(side, cst.Attribute) and isinstance(side.value, cst.Name) \
                                    and side.value.value in self.entities and \
                                    self.entities[side.value.value].source != "param":
                                subject = self.entities[side.value.value]
                                return ("limit", f"`{code_of(side)}` against a limit",
                                        maybe_models(subject.model), subject, side.attr.value)
                    left = right
            elif isinstance(n, cst.UnaryOperation) and isinstance(n.operator, cst.Not):
                e = n.expression
                if isinstance(e, cst.Name) and e.value in self.entities and \
                        self.entities[e.value].maybe_none:
                    return ("none", f"`not {e.value}`", maybe_models(self.entities[e.value].model))
                got = self.classify_get(e) if isinstance(e, cst.Call) else None
                if got is not None and got.maybe_none:
                    return ("none", "a missing row", maybe_models(got.model))     # ``if not q.first():``
                stack.append(e)
            elif isinstance(n, cst.BooleanOperation):
                stack.extend([n.left, n.right])
            elif isinstance(n, cst.Name) and n.value in self.entities and \
                    self.entities[n.value].maybe_none:
                return ("none", f"`{n.value}`", maybe_models(self.entities[n.value].model))
        return None

    def act(self, node: cst.CSTNode, what: str, model: Optional[str] = None,
            kind: str = "create", entity: Optional[Entity] = None) -> None:
        """An insert, save or update: judged against the checks made before it (TXN105)."""
        self.work_lines.append(self.line(node))
        if kind == "create" and not self.integrity_depth:
            self.creates.append((self.line(node), model))     # for callers' checks
        self.write_lines.append(self.line(node))
        if not self.checks:
            return
        act = Act(self.line(node), what, ActKind(kind), model, frozenset(names_in(node)),
                  insert_keys(node) if kind == ActKind.CREATE else None, entity)
        pending = []
        for c in self.checks:
            depends = depends_on(c, act, UNPROTECTED_POLICIES)
            if depends is None:
                c.used = True
            elif depends:
                pending.append(c)
        if not pending:
            return
        check = pending[-1]
        for c in pending:
            c.used = True
        if unique_key_settles(check, act, self.mod.cfg.unique_keys):
            presence.note_settled(self, check, act, node)    # the get-or-create contract
            return
        if act.line in self.reported_write_lines or self.integrity_depth:
            return
        if check.locked and {id(s) for s in check.stack} <= self.stack_ids():
            return
        self.report(node, "TXN105", check_then_act_message(check, act, self.framework_hint()),
                    confidence=check_then_act_confidence(check, act, set(self.param_order)))

    def callee_insert(self, site: "CallSite", callee: "FunctionAnalyzer") -> None:
        """TXN105 at a call whose callee inserts (``self._create_token(...)`` after ``if not
        previous:``): the caller's check, as it stood at the call, and the callee's insert."""
        if site.guarded or not site.checks or not callee.creates:
            return
        if callee.is_method != site.on_self or (callee.is_method and
                                                callee.qualname.split(".")[0] != self.qualname.split(".")[0]):
            return      # only a module function, or a method of this class called on ``self``
        c_line, model = callee.creates[0]
        where = "line" if callee.mod is self.mod else \
            f"{os.path.basename(callee.mod.filename) or 'another module'} line"
        act = Act(site.line, f"`{callee.name}()` (inserting at {where} {c_line})", ActKind.CREATE,
                  model, site.names, None, None)
        pending = [c for c in site.checks if depends_on(c, act, UNPROTECTED_POLICIES)]
        if not pending:
            return
        check = pending[-1]
        if unique_key_settles(check, act, self.mod.cfg.unique_keys) or \
                (check.locked and {id(s) for s in check.stack} <= {id(s) for s in site.stack}):
            return
        if self.mod.cfg.code_enabled("TXN105"):
            self.mod.add(Finding(site.line, site.col, "TXN105",
                                 check_then_act_message(check, act, self.framework_hint())))

    def framework_hint(self) -> Optional[str]:
        fws = self.mod.info.frameworks
        for fw in ("django", "sqlalchemy", "ndb"):
            if fw in fws:
                return fw
        return None

    # -- compound statements
    def with_(self, node: cst.With) -> None:
        pushed: list[Scope] = []
        for item in node.items:
            expr = item.item
            as_name = item.asname.name.value if item.asname is not None and \
                isinstance(item.asname.name, cst.Name) else None
            if isinstance(expr, cst.Call) and name_matches(dotted(expr.func), {"fetch_under_lock"}):
                # ``with fetch_under_lock(x) as x:`` takes x's user lock and yields a fresh copy
                scope = Scope("lock", label(expr), self.line(node))
                self.stack.append(scope)
                pushed.append(scope)
                if as_name:
                    arg = expr.args[0].value if expr.args else None
                    old = self.entities.get(arg.value) if isinstance(arg, cst.Name) else None
                    info = GetInfo(old.model if old else None, old.getter if old else None,
                                   old.key if old else None, old.framework if old else None)
                    fresh = self.new_entity(as_name, info, self.line(node))
                    fresh.policy = fresh.policy or (old.policy if old else None)
                continue
            scope = self.scope_for(expr, self.line(node), as_name=as_name)
            if scope is not None:
                self.stack.append(scope)
                pushed.append(scope)
                if as_name and scope.kind == "txn":
                    self.sessions.add(as_name)
            else:
                self.calls_in(expr)
                if as_name and ("session" in dotted(expr).lower() or "connect" in dotted(expr)):
                    self.sessions.add(as_name)
                elif as_name:
                    self.note_local(as_name, expr)     # ``with stack.Auto() as own:``
        self.block(node.body)
        line = self.line(node)
        for scope in reversed(pushed):
            if scope.kind == "txn" and scope.framework == "sqlalchemy":
                self.flush_all(node, verb="flushed when the block commits", line=line,
                               session=scope.session)
                self.release_row_locks(line)
            self.stack.remove(scope)

    def loop(self, node: cst.For) -> None:
        it = node.iter
        line = self.line(node)
        info = None
        if isinstance(it, cst.Name) and it.value in self.querysets:
            info = self.querysets[it.value]
        elif isinstance(it, cst.Call) or isinstance(it, cst.Attribute):
            names, calls, root = chain(it)
            related = related_model(names) if "django" in self.mod.info.frameworks else None
            if self.manager_chain(names) or related:
                fu = any(terminal(c) == "select_for_update" for c in calls)
                model = related or (root.value if isinstance(root, cst.Name) and is_model_name(root.value) else None)
                info = GetInfo(model, model, None, "django", for_update=fu)
                info.state = state_columns(it)
            else:
                info = self.sqla_rows(it)
        self.calls_in(it)
        if isinstance(it, cst.Name) and isinstance(node.target, cst.Name):
            self.loop_of[node.target.value] = it.value
        rows = self.entities.get(it.value) if isinstance(it, cst.Name) and info is None else None
        for bound in names_in(node.target):
            if bound not in (getattr(it, "value", None),):
                self.entities.pop(bound, None)   # the loop rebinds the name: an older row is gone
        if rows is not None and rows.source in ("get", "call") and isinstance(node.target, cst.Name):
            # ``rows = session.scalars(...).all()`` then ``for row in rows``: each is a row of that read
            self.entities[node.target.value] = dataclasses.replace(
                rows, name=node.target.value, source="loop", pending=[], writes=[])
        if info is not None and isinstance(node.target, cst.Name):
            if info.for_update:
                fake = GetInfo(info.model, info.getter, None, info.framework, for_update=True)
                if self.in_txn() is None and info.framework == "django":
                    self.report(node, "TXN108", deferrable=True, message=txn108.message(line, loop=True))
                self.row_locks.append((line, self.in_txn()))
                self.lock_models[line] = info.model
                info = fake
            self.new_entity(node.target.value, info, line, source="loop")
        self.block(node.body)
        if node.orelse is not None:
            self.block(node.orelse.body)

    def stores_new_object(self, call: cst.Call) -> None:
        """``repo.create_from(project)``, ``self.save(kek_datum)``, ``self.create_zone(ctx,
        Zone(...))``: a new object handed to a method named for storing it is an insert, made
        by a repository or service the walk does not follow."""
        for arg in call.args:
            value = arg.value
            model = self.new_objects.get(value.value) if isinstance(value, cst.Name) else \
                self.constructed(value)
            if model is not None:
                self.act(call, f"`{label(call.func)}()` of a new `{model}`",
                         None if model.endswith(_FORM_CLASSES) or model == "object" else model, "create")
                return

    def constructed(self, value: cst.BaseExpression) -> Optional[str]:
        """The model a call makes a new instance of: ``Order(...)``, ``models.Order(...)`` (a
        module's class), ``cls(...)`` in a class's method (that class)."""
        if not isinstance(value, cst.Call):
            return None
        func = dotted(value.func)
        head, _, last = func.rpartition(".")
        if is_model_name(last) and (not head or head.split(".")[-1].islower()):
            return last
        if func == "cls" and self.is_method:
            return self.qualname.split(".", 1)[0]
        if func in _CLASS_HOLDERS:
            return "object"         # ``model = self.related.related_model; obj = model(...)``
        return None

    def note_selection(self, targets, value: cst.BaseExpression, line: int) -> None:
        """Keep (or forget) what each assigned name holds of a selection by state."""
        state = frozenset().union(*(state_columns(c) for c in iter_calls(value)))
        from_names = [self.selections[n] for n in names_in(value) if n in self.selections]
        for t in targets:
            if not isinstance(t.target, cst.Name):
                continue
            name = t.target.value
            if state:
                self.selections[name] = Selection(name, line, state, bool(_LOCKING.search(code_of(value))))
            elif from_names:                 # ``ids = [t.id for t in rows]``
                self.selections[name] = dataclasses.replace(from_names[0], name=name)
            else:
                self.selections.pop(name, None)

    def note_handed_on(self, call: cst.Call, name: str) -> None:
        """Rows passed to a call that is not logging (``run(task)``, ``out.append(task.pk)``)."""
        if _LOGGING.match(name):
            return
        line = self.line(call)
        for arg in call.args:
            for n in names_in(arg.value):
                if n in self.entities or n in self.querysets:
                    self.handed_on.append((line, n))

    def update_claim(self, call: cst.Call) -> None:
        """An update of rows a variable selected by state, setting that state (TXN105)."""
        set_cols = set_columns(call)
        if not set_cols:
            return
        own = state_columns(call)
        line = self.line(call)
        for name in sorted(condition_names(call) & set(self.selections)):
            sel = self.selections[name]
            columns = claimed_by_update(sel, set_cols, own)
            if columns and not any(s.kind == "lock" or s.serializable for s in self.stack):
                self.work_lines.append(line)
                self.report(call, "TXN105", update_message(
                    sel, columns, line, f"`{label(call.func)}()`", self.framework_hint()),
                    deferrable=True, confidence=Confidence.MEDIUM)
                return

    def sqla_rows(self, expr: cst.BaseExpression) -> Optional[GetInfo]:
        """``session.scalars(select(M).where(..)).all()``, ``session.query(M).filter(..).all()``:
        many rows of a SQLAlchemy read, to be looped over."""
        if not isinstance(expr, cst.Call) or terminal(expr) not in ("scalars", "all"):
            return None
        names, calls, _root = chain(expr)
        if not any(terminal(c) in ("scalars", "query", "execute") for c in calls):
            return None
        model = None
        for c in calls:
            if terminal(c) == "query":
                model = first_arg_name(c) or model
            for a in c.args if terminal(c) in ("scalars", "execute") else ():
                if isinstance(a.value, cst.Call):
                    model = next((first_arg_name(cc) for cc in chain(a.value)[1]
                                  if terminal(cc) == "select"), None) or model
        info = GetInfo(model, None, None, "sqlalchemy", for_update="with_for_update" in code_of(expr))
        info.state = state_columns(expr) | frozenset().union(
            *(state_columns(a.value) for c in calls for a in c.args if isinstance(a.value, cst.Call)))
        return info

    def try_(self, node: cst.Try) -> None:
        integrity = any(h.type is not None and INTEGRITY_ERRORS.search(code_of(h.type))
                        for h in node.handlers)
        not_found = any(h.type is not None and NOT_FOUND_ERRORS.search(code_of(h.type))
                        for h in node.handlers)
        if integrity:
            self.integrity_depth += 1
        get_line = None
        get_model = None
        get_lookup = None
        if not_found:
            for stmt in node.body.body:
                for call in iter_calls(stmt):
                    got = self.classify_get(call)
                    if got is not None:
                        get_line = self.line(call)
                        get_model = got.model
                        get_lookup = got.lookup
                        break
                if get_line:
                    break
            if get_line is None:
                # ``try: repo.find(key) except ZoneNotFound:``: the exception says the body's
                # first call is a lookup, of a model the walk cannot name
                first = next((c for stmt in node.body.body for c in iter_calls(stmt)), None)
                get_line = self.line(first) if first is not None else None
        self.block(node.body)
        if integrity:
            self.integrity_depth -= 1
        for h in node.handlers:
            miss = None
            if get_line is not None and h.type is not None and NOT_FOUND_ERRORS.search(code_of(h.type)):
                miss = Check(get_line, CheckKind.NONE, f"a missing row (a lookup whose `{code_of(h.type)}` is caught)",
                             tuple(self.stack), self.protected_now(maybe_models(get_model)),
                             maybe_models(get_model))
                miss.lookup = get_lookup
                self.checks.append(miss)
            self.helper_checks.missing += miss is not None
            self.block(h.body)
            self.helper_checks.missing -= miss is not None
            if miss is not None and exits(h.body):
                # ``except DoesNotExist: raise Http404``: what follows the try has the row
                miss.used = True
            elif miss is not None:
                close_checks([miss], [h.body])
        if node.orelse is not None:
            self.block(node.orelse.body)
        if node.finalbody is not None:
            self.block(node.finalbody.body)
