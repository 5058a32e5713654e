"""Checks made before an act (exists, count, lookup miss, aggregate) and the acts.

One part of :class:`.walk.FunctionAnalyzer`, the per-function walk; it only
records facts and emits events.
"""
from __future__ import annotations

from typing import Optional

import libcst as cst

from ..facts.model import Act, ActKind, Check, CheckKind, Entity
from ..facts.syntax import (
    chain, code_of, dotted, insert_keys, iter_calls, lookup_columns, maybe_models, models_in, names_in,
    terminal)
from ..facts.values import insert_values, inserted_object, update_changes_relative
from . import presence
from .events import Acted, AggregateStored


class CheckFacts:
    """Checks made before an act (exists, count, lookup miss, aggregate) and the acts."""

    def check_kind(self, expr: cst.CSTNode) -> Optional[tuple]:
        for call in iter_calls(expr):
            t = terminal(call)
            if t == "exists" and self.orm_query(call):
                return ("exists", "existence")
        while isinstance(expr, cst.UnaryOperation):
            expr = expr.expression
        if isinstance(expr, cst.Attribute) and expr.attr.value == "rowcount":
            expr = expr.value
        if isinstance(expr, cst.Call) and self.queryset_update(expr):
            return ("updated", "the rows an update matched")  # ``if not qs.update(n=F("n") + 1):``
        if isinstance(expr, cst.BooleanOperation):      # ``if flag and 0 < LIMIT <= M.objects.count():``
            return self.check_kind(expr.left) or self.check_kind(expr.right)
        if isinstance(expr, cst.Comparison):
            for call in iter_calls(expr):
                t = terminal(call)
                if t == "count" and (self.orm_query(call) or sql_function(call, "count")):
                    return ("count", "a count")
                if t in ("update", "execute") and self.queryset_update(call):
                    return ("updated", "the rows an update matched")
                if t == "len" and isinstance(call.func, cst.Name) and call.args and \
                        isinstance(call.args[0].value, cst.Call) and \
                        self.orm_query(call.args[0].value):
                    return ("count", "a count")
        return None

    def queryset_update(self, call: cst.Call) -> bool:
        """An update whose result counts the rows it matched: ``M.objects.filter(..).update(..)``,
        ``qs.update(..)`` of a queryset bound here, SQLAlchemy's ``session.query(M)...update()``
        and ``session.execute(update(M)...)`` (its ``rowcount``)."""
        term = terminal(call)
        if term == "execute":
            inner = call.args[0].value if call.args else None
            return isinstance(inner, cst.Call) and any(terminal(c) == "update" for c in chain(inner)[1])
        if term != "update":
            return False
        names, _calls, root = chain(call)
        root_name = root.value if isinstance(root, cst.Name) else ""
        if self.manager_chain(names) or root_name in self.querysets:
            return True
        return "query" in names and (root_name in self.sessions or any("session" in n.lower() for n in names))

    def update_is_relative(self, expr: cst.CSTNode) -> bool:
        """Whether the update behind a row-count check (inline, or its count kept in a
        variable) changes the row relative to itself (``facts.syntax.update_changes_relative``)."""
        updates = [c for c in iter_calls(expr) if self.queryset_update(c)]
        if updates:
            return any(update_changes_relative(c) for c in updates)
        return any(self.update_relative.get(n, True) for n in names_in(expr) if n in self.check_vars)

    def aggregate_kind(self, expr: cst.CSTNode) -> Optional[str]:
        """``"a count"`` / ``"an aggregate"`` when ``expr`` reads one from the database."""
        for call in iter_calls(expr):
            t = terminal(call)
            if t == "count" and (self.orm_query(call) or sql_function(call, "count")):
                return "a count"
            if (t == "aggregate" and self.orm_query(call)) or sql_function(call, "max", "count"):
                return "an aggregate"
        return None

    def stored_aggregate(self, tgt: cst.Attribute, value: cst.BaseExpression, line: int) -> None:
        """``self.number = last + 1`` in a model method (``clean()``, ``save()``): the value the
        row will be saved with comes from an aggregate read just before (TXN105); the save
        is the caller's, so the walk reports where the value is stored."""
        ent = self.entities.get(tgt.value.value) if isinstance(tgt.value, cst.Name) else None
        if ent is None or ent.source != "self":
            return
        self.emit(AggregateStored(line, tuple(self.stack), tgt, frozenset(names_in(value))))

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
        check.listed = listed_collections(value)
        self.add_check(check)
        for n in names:         # ``if n > 0:`` later tests the count: its lookup, as for a kept check
            self.keep_lookup(n, value)

    def keep_lookup(self, name: str, value: cst.BaseExpression) -> None:
        """``name`` holds a check or a count made by ``value``: the names and the columns of its
        lookup, for the test that reads ``name`` later."""
        used = names_in(value)
        self.check_keys[name] = used.union(*(self.queryset_keys.get(k, ()) for k in used))
        self.check_lookups[name] = self.lookup_of(value)

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
        if found is not None and counts_every_listed(test, self.checks):
            return      # ``if n != len(ids): raise``: the rows it names exist; no limit
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
            check.keys = names_in(test).union(*(self.check_keys.get(n, ()) for n in names_in(test)),
                                              *(self.queryset_keys.get(n, ()) for n in names_in(test)))
            check.lookup = self.lookup_of(test)
            check.lookup_values = self.lookup_values_of(test, check.keys)
            if check.kind is CheckKind.UPDATED:
                check.relative = self.update_is_relative(test)
            self.add_check(check)

    def found_in_body(self, test: cst.BaseExpression) -> bool:
        """Whether the ``if`` body is the branch where the checked row exists: ``if
        q.exists():``, ``if obj:``, ``if obj is not None:`` (not ``if not ...`` or ``is None``)."""
        return self.row_test_polarity(test) is True

    def row_test_polarity(self, test: cst.BaseExpression) -> Optional[bool]:
        """Which outcome of a row check the ``if`` body is: True where the row exists (``if
        obj:``), False where it is missing (``if not q.exists():``, ``if obj is None:``),
        None when the test names no row check."""
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
            elif isinstance(node, cst.Comparison) and len(node.comparisons) == 1 and \
                    self.update_count(node.left) and _is_zero_test(node.comparisons[0]):
                return negated              # ``if updated == 0:`` is where no row matched
            elif isinstance(node, cst.Call) and (terminal(node) == "exists" or
                                                 self.classify_get(node) is not None):
                return not negated
            elif isinstance(node, cst.Name) and node.value in self.entities or presence.found_test(self, node):
                return not negated
            elif self.update_count(node):
                return not negated          # ``if updated:`` / ``if not qs.update(...):``
        return None

    def update_count(self, expr: cst.BaseExpression) -> bool:
        """The number of rows an update matched: ``qs.update(...)``, ``result.rowcount`` of
        an executed update, or a name holding either."""
        if isinstance(expr, cst.Attribute) and expr.attr.value == "rowcount":
            expr = expr.value
        if isinstance(expr, cst.Name):
            return expr.value in self.update_relative
        return isinstance(expr, cst.Call) and self.queryset_update(expr)

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

    def lookup_values_of(self, test: cst.BaseExpression, keys: set) -> frozenset:
        """What the values of the lookup behind a check are made from: the names the check
        reads (its lookup's arguments, inline or kept in a variable) and, for a row read
        earlier (``if not row:``), what that read's lookup compared."""
        found = set(keys)
        for n in names_in(test):
            ent = self.entities.get(n)
            if ent is not None and ent.maybe_none:       # the row whose presence is checked
                found.discard(n)
                found |= ent.lookup_values
        return frozenset(n for n in found if n[:1].islower())

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
        values = columns = None
        if kind == ActKind.CREATE:
            built = inserted_object(node)
            if built in self.new_object_values:
                # ``obj = M(..)``, ``obj.col = v``, then ``session.add(obj)`` / ``obj.save()`` /
                # an object layer's ``obj.create()``: the columns seen set on it, some of the
                # insert's (``obj.update(values)`` may set more), so its columns stay unknown
                values = dict(self.new_object_values[built])
            else:
                values, columns = insert_values(node), insert_keys(node)
        act = Act(self.line(node), what, ActKind(kind), model, frozenset(names_in(node)),
                  columns, entity, values)
        self.emit(Acted(act.line, tuple(self.stack), act, node))


def _is_zero_test(target: cst.ComparisonTarget) -> bool:
    """``== 0`` or ``< 1``: the comparison says no row matched."""
    value = target.comparator
    if not isinstance(value, cst.Integer):
        return False
    return (isinstance(target.operator, cst.Equal) and value.value == "0") or \
        (isinstance(target.operator, cst.LessThan) and value.value == "1")


def listed_collections(expr: cst.BaseExpression) -> frozenset:
    """The names a query's filter lists: ``M.id.in_(ids)``, ``filter(pk__in=ids)``."""
    out = set()
    for call in iter_calls(expr):
        for a in call.args:
            listed = terminal(call) == "in_" and a.keyword is None or \
                a.keyword is not None and a.keyword.value.endswith("__in")
            if listed and isinstance(a.value, cst.Name):
                out.add(a.value.value)
    return frozenset(out)


def counts_every_listed(test: cst.BaseExpression, checks: list) -> bool:
    """Whether ``test`` compares a count of the rows a list names with that list's length
    (``if n < len(ids): raise NotFound``, ``if qs.filter(pk__in=ids).count() != len(ids)``).

    That validates references, the request's own ids: the act that follows does not add to
    what was counted, so no limit is being kept and two requests cannot both pass it into a
    state the check forbids.  A limit compares with a constant or a setting instead."""
    for node in _comparisons(test):
        sides = [node.left] + [c.comparator for c in node.comparisons]
        lengths = {s.args[0].value.value for s in sides
                   if isinstance(s, cst.Call) and isinstance(s.func, cst.Name) and s.func.value == "len"
                   and len(s.args) == 1 and isinstance(s.args[0].value, cst.Name)}
        if not lengths:
            continue
        for side in sides:
            if isinstance(side, cst.Name):
                listed = frozenset().union(*(c.listed for c in checks
                                             if c.kind is CheckKind.AGGREGATE and side.value in c.names))
            else:
                listed = listed_collections(side)
            if lengths & listed:
                return True
    return False


def _comparisons(test: cst.BaseExpression) -> list:
    out, stack = [], [test]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Comparison):
            out.append(node)
        elif isinstance(node, cst.BooleanOperation):
            stack.extend([node.left, node.right])
        elif isinstance(node, cst.UnaryOperation):
            stack.append(node.expression)
    return out


def sql_function(call: cst.Call, *names: str) -> bool:
    """``func.count(...)`` however ``func`` is reached: ``sqlalchemy.func.count``,
    ``sa.func.max``, Flask-SQLAlchemy's ``db.func.count``."""
    parts = dotted(call.func).rsplit(".", 2)
    return len(parts) >= 2 and parts[-2] == "func" and parts[-1] in names
