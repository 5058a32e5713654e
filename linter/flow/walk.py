"""The per-function walk: a statement-ordered walk of one function body.

It fills in the function's :class:`~.state.FunctionState` (which names hold entities, read by
a get, returned by a loader, given as parameters or ``self`` of a model method; how they are
mutated, blind, derived, counter, atomic; where they are written; the checks made before an
insert; the stack of transactions and locks around every read and write) and emits an event
(``events.py``) for each thing that happens.  It judges nothing: the rules handed to the
module's driver (``subscribers.py``) hear the events and decide.

The walk is assembled from one part per kind of syntax, each a mixin of its own module
(``statements.py``, ``reads.py``, ``assign.py``, ``calls.py``, ``writes.py``, ``checks.py``).
"""
from __future__ import annotations

from typing import Optional

import libcst as cst

from ..facts.config import IMPORT_ROOTS, NOT_LOCKS, name_matches
from ..facts.model import Entity, Scope
from ..facts.module_facts import GetInfo, MANAGER_BASES
from ..facts.provenance import request_data
from ..facts.sessions import cst_local_names, is_session_type, shape_of_cst
from ..facts.syntax import MANAGERS, code_of, dotted, is_model_name
from . import presence
from .assign import AssignFacts
from .calls import CallFacts
from .checks import CheckFacts
from .events import FunctionEnded
from .reads import ReadFacts
from .records import CallSite, Returned, _Positions  # noqa: F401  (re-exported)
from .state import FunctionState
from .statements import StatementWalk
from .writes import WriteFacts
from .switches import off_by_default


class FunctionAnalyzer(FunctionState, StatementWalk, ReadFacts, AssignFacts, CallFacts, WriteFacts, CheckFacts):
    """Walks one function body in statement order (:meth:`run`)."""

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
        every = list(params.posonly_params) + list(params.params) + list(params.kwonly_params)
        self.off_switches = frozenset(p.name.value for p in every if off_by_default(p))
        for p in every:
            pname = p.name.value
            self.param_order.append(pname)
            if pname == "cls":
                continue
            self.types[pname] = self.param_type(p, first=not self.param_order[:-1])
            if request_data(p):
                continue        # a form or serializer: the request's values, not a row read
            if self.service_self(pname):
                continue        # a service's ``self``: process state, not a row
            ent = self.self_entity(pname, line) or Entity(pname, line, (), "param", framework=None)
            if self.is_receiver() and pname not in ("sender", "self"):
                # a signal receiver's rows were read by the sender, which no call here shows
                ent.source, ent.via = "call", "the signal's sender"
            self.params[pname] = ent
            self.entities[pname] = ent
            self.taint.pop(pname, None)
        self.block(node.body)
        for scope in [s for s in self.stack if s.decorator and s.kind == "txn" and s.framework == "sqlalchemy"]:
            # ``@with_session`` / ``@in_transaction``: what the function changed flushes when
            # the decorator commits, after its last statement
            self.flush_all(node, verb=f"flushed when `@{scope.label}` commits", line=line)
        presence.finish(self)
        self.emit(FunctionEnded(line, ()))

    def is_receiver(self) -> bool:
        """A signal receiver: its parameters are rows the sender read, and no call in the
        project shows that read, so its writes of them are judged here."""
        return self.outer is None and self.name in self.mod.info.receivers

    def service_self(self, pname: str) -> bool:
        """``self`` of a plain class's method (see ``ModuleInfo.service_classes``)."""
        return pname == "self" and self.is_method and self.outer is None and \
            not self.param_order[:-1] and self.qualname.split(".", 1)[0] in self.mod.info.service_classes

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
            # the project's own wrapper (found by the wrapper search: it commits once) never
            # retries, whatever framework's retrying runner shares its name
            own = self.project_import(name) and not name_matches(name, self.mod.cfg.retrying_transactions)
            retrying = name_matches(name, v.retrying) and not own
            is_ndb = not own and (last in ("transactional", "transaction", "run_in_transaction",
                                           "transactional_tasklet", "transaction_async") or
                                  name.startswith(("ndb.", "db.")))
            fw = "ndb" if is_ndb else ("sqlalchemy" if last in ("begin", "begin_nested") else "django")
            serializable = (v.ndb_serializable if fw == "ndb" else not v.weak_isolation)
            session = None
            if last in ("begin", "begin_nested"):
                recv = name.rsplit(".", 1)[0] if "." in name else None
                session = as_name or recv
            elif fw == "django" and "django" not in self.mod.info.frameworks:
                # a project's unit of work outside Django (``with session_scope() as s:``,
                # ``@with_session``): SQLAlchemy's, whose changes flush when it commits
                fw, session = "sqlalchemy", as_name
            return Scope("txn", label, line, retrying=retrying, serializable=serializable,
                         decorator=decorator, session=session, framework=fw)
        if name_matches(name, v.locks) and call is not None:
            return Scope("lock", label, line, decorator=decorator)
        return None

    def foreign_name(self, name: str) -> bool:
        """A bare name imported from a module of no framework (``from myapp.db import
        transactional``) that configuration does not name: the project's own function, not
        the framework's namesake (mailman's ``@transactional`` commits once, never retries)."""
        if not self.project_import(name):
            return False
        cfg = self.mod.cfg
        return not name_matches(name, {n for n in cfg.transactions | cfg.retrying_transactions if "." not in n})

    def project_import(self, name: str) -> bool:
        """A bare name imported from a module of no framework: the project's own."""
        if "." in name or name not in self.mod.info.imports:
            return False
        origin = self.mod.info.imports[name][0]
        return not any(origin == root or origin.startswith(root + ".") for root in IMPORT_ROOTS)

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

    def manager_chain(self, names: list[str]) -> bool:
        """``M.objects...``, ``M._default_manager...`` or a manager the project's models
        declare (``OrderPosition.all.get()``)."""
        if MANAGERS.intersection(names[1:]):
            return True
        return len(names) > 1 and names[1] in self.mod.cfg.managers and is_model_name(names[0])
