"""Statement by statement: blocks, branches, with, loops, try, return.

One part of :class:`.walk.FunctionAnalyzer`, the per-function walk; it only
records facts and emits events.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import libcst as cst

from ..facts.config import name_matches
from ..facts.model import Check, CheckKind, Entity, Scope
from ..facts.syntax import (
    INTEGRITY_ERRORS, NOT_FOUND_ERRORS, branches, chain, code_of, dotted, exits, is_model_name,
    iter_calls, label, maybe_models, names_in, terminal)
from . import conditions, presence, row_streams
from ..facts.module_facts import GetInfo
from .check_scopes import close as close_checks
from .check_scopes import normalises
from ..facts.query_selection import related_model, state_columns
from .events import LockedRead, RowRead

from .records import Returned
from .switches import switch_tested


#: calls in an ``IntegrityError`` handler that apply the change again to the row that won
_REAPPLYING = frozenset({"update", "save", "update_or_create"})


class StatementWalk:
    """Statement by statement: blocks, branches, with, loops, try, return."""

    # -- statements
    def block(self, body) -> None:
        if isinstance(body, cst.SimpleStatementSuite):
            for small in body.body:
                self.small(small, body)
            return
        stmts = body.body if hasattr(body, "body") and not isinstance(body, (list, tuple)) else body
        for stmt in stmts:
            self.statement(stmt)

    def if_body(self, stmt: cst.If) -> None:
        """The body of ``if``; under ``if commit:`` of an off-by-default parameter its writes are
        reached only by callers that pass the switch (switches.py)."""
        switch = switch_tested(stmt.test, self.off_switches) if self.off_switches else None
        if switch:
            self.switches_on.append(switch)
        self.block(stmt.body)
        if switch:
            self.switches_on.pop()

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
                self.enter(Scope("txn", "the caller's transaction (checked by `in_atomic_block`)",
                                 self.line(stmt)))
            self.if_body(stmt)
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
            elif made and stmt.orelse is None and exits(stmt.body) and self.row_test_polarity(stmt.test) is False:
                # ``if not row: raise NotFound``: what follows is where the row exists, and an
                # insert there fills no gap the check saw (it duplicates nothing it looked up)
                for c in made:
                    c.used = c.used or c.kind.missing_row
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
        inner = type(self)(self.mod, node, self.positions, self.offset,
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
            row_streams.note_out(self, small)
            out = small.value if isinstance(small, cst.Return) else \
                small.value.value if isinstance(small, cst.Expr) and isinstance(small.value, cst.Yield) else None
            if out is not None and (self.claims or self.update_claims):   # claimed rows returned or yielded
                line = self.line(small)
                self.handed_on.extend((line, n) for n in names_in(out) if n in self.entities or
                                      n in self.querysets or n in self.selections)
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
                                         ret.versioned, ret.policy, ret.position)
        elif isinstance(value, cst.Name) and value.value in self.entities:
            self.return_entity(self.entities[value.value], None)
        elif isinstance(value, cst.Tuple):
            # ``return artifact, parent``: the first row read here, at its place in the tuple
            for position, element in enumerate(value.elements):
                item = element.value
                if isinstance(item, cst.Name) and item.value in self.entities:
                    self.return_entity(self.entities[item.value], position)
                    return

    def return_entity(self, ent: Entity, position: Optional[int]) -> None:
        if ent.source in ("get", "call"):
            info = GetInfo(ent.model, ent.getter, ent.key, ent.framework,
                           for_update=ent.for_update, locked=ent.locked_read,
                           maybe_none=ent.maybe_none)
            self.returned = Returned(info, ent.scopes, ent.read_line, ent.versioned,
                                     ent.policy, position)

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
                self.enter(scope)
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
                self.enter(scope)
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
            self.leave(scope, line)

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
            self.emit(RowRead(line, tuple(self.stack), self.entities[node.target.value]))
        if info is None and rows is None and isinstance(node.target, cst.Name):
            row_streams.bind_iterated(self, it, node.target.value, line)    # ``for m in helper()``
        if info is not None and isinstance(node.target, cst.Name):
            if info.for_update:
                fake = GetInfo(info.model, info.getter, None, info.framework, for_update=True)
                self.emit(LockedRead(line, tuple(self.stack), info, node, in_loop=True))
                self.row_locks.append((line, self.in_txn()))
                self.lock_models[line] = info.model
                info = fake
            self.new_entity(node.target.value, info, line, source="loop")
        self.block(node.body)
        if node.orelse is not None:
            self.block(node.orelse.body)

    def try_(self, node: cst.Try) -> None:
        integrity = any(h.type is not None and INTEGRITY_ERRORS.search(code_of(h.type))
                        for h in node.handlers)
        not_found = any(h.type is not None and NOT_FOUND_ERRORS.search(code_of(h.type))
                        for h in node.handlers)
        reapplies = integrity and any(
            h.type is not None and INTEGRITY_ERRORS.search(code_of(h.type)) and
            any(terminal(c) in _REAPPLYING for c in iter_calls(h.body)) for h in node.handlers)
        if integrity:
            self.integrity_depth += 1
            self.reapplying_depth += reapplies
        get_line = None
        get_model = None
        get_lookup = None
        get_values: frozenset = frozenset()
        if not_found:
            for stmt in node.body.body:
                for call in iter_calls(stmt):
                    got = self.classify_get(call)
                    if got is not None:
                        get_line = self.line(call)
                        get_model = got.model
                        get_lookup = got.lookup
                        get_values = got.lookup_values
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
            self.reapplying_depth -= reapplies
        after_body = dict(self.entities)
        for h in node.handlers:
            miss = None
            if get_line is not None and h.type is not None and NOT_FOUND_ERRORS.search(code_of(h.type)):
                miss = Check(get_line, CheckKind.NONE, f"a missing row (a lookup whose `{code_of(h.type)}` is caught)",
                             tuple(self.stack), self.protected_now(maybe_models(get_model)),
                             maybe_models(get_model))
                miss.lookup = get_lookup
                miss.lookup_values = get_values
                miss.single_row = True
                self.add_check(miss)
            self.helper_checks.missing += miss is not None
            self.block(h.body)
            self.helper_checks.missing -= miss is not None
            self.rejoin_after_handler(after_body, exits(h.body))
            if miss is not None and exits(h.body):
                # ``except DoesNotExist: raise Http404``: what follows the try has the row
                miss.used = True
            elif miss is not None:
                close_checks([miss], [h.body])
        if node.orelse is not None:
            self.block(node.orelse.body)
        if node.finalbody is not None:
            self.block(node.finalbody.body)

    def rejoin_after_handler(self, after_body: dict, handler_exits: bool) -> None:
        """What a name holds after a ``try``: the body's row, not a handler's rebinding.

        The body is the common path.  A handler that leaves (``raise``, ``return``) hands
        nothing on; one that falls through (``except DoesNotExist: row = create_row()``)
        binds the name on the rare path only, and the row the body read is the one a later
        change can find stale.  A new object the handler builds stays (a ``save()`` after the
        ``try`` is then the insert of a get-or-create).  Before this, the last handler's binding won: a helper's new
        row hid the read row from the read-modify-write rules."""
        changed = [n for n in {**after_body, **self.entities} if after_body.get(n) is not self.entities.get(n)]
        for name in changed:
            kept = after_body.get(name)
            if name in self.new_objects and not handler_exits:
                continue        # ``except DoesNotExist: row = Model(..)``: the insert the check-then-act needs
            if kept is None:
                if handler_exits:
                    del self.entities[name]
            elif handler_exits or kept.source in ("get", "loop"):
                self.entities[name] = kept

    # -- expressions
    def calls_in(self, node: cst.CSTNode, skip: Optional[cst.Call] = None) -> None:
        with row_streams.comprehension_rows(self, node):
            for call in iter_calls(node):
                if call is not skip:
                    self.call(call)
