"""Assignments: new entities, mutations (blind, derived, counter, atomic), selections.

One part of :class:`.walk.FunctionAnalyzer`, the per-function walk; it only
records facts and hands verdicts to the rules.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Optional

import libcst as cst

from ..facts.model import Entity, Mutation
from ..facts.syntax import (
    chain, code_of, dotted, is_model_name, iter_calls, kids, models_in, names_in, non_numeric,
    terminal, walk_nodes)
from ..facts.values import constructor_values, value_origins
from . import conditions, presence, row_streams, sqla_queries
from ..facts.module_facts import GetInfo
from ..facts.provenance import identity_only, request_object
from ..facts.query_selection import Selection
from ..facts.query_selection import request_row
from ..facts.query_selection import is_constant, is_slice, state_columns


#: local names that hold a model class in generic code (``model(**kwargs)`` makes a row)
_CLASS_HOLDERS = frozenset({"model", "klass", "model_class", "model_cls", "related_model"})

#: a selection that takes row locks: ``select_for_update()``, ``with_for_update()``, a
#: project helper that adds them (``with_row_locks(query, skip_locked=True)``)
_LOCKING = re.compile(r"for_update|skip_locked|nowait=|\b\w*_locks?\(|\block_\w*\(", re.I)


def keep_or_drop(facts: dict, name: str, value) -> None:
    """``facts[name] = value`` when there is something to keep, else forget ``name``."""
    if value:
        facts[name] = value
    else:
        facts.pop(name, None)


#: a function that returns a row that exists: ``get_x``, ``_fetch``, ``load_y``, ``find``
#: (not ``get_or_create``, ``get_or_new``: those may return a row not inserted yet)
_GETTER = re.compile(r"^_*(?:get|fetch|load|find|lookup|read|retrieve)(?:_.*)?$")


def _returned_names(targets, position: Optional[int]) -> list[str]:
    """The names a helper's returned row is bound to: each target, for a row returned
    alone; the element at ``position`` of each tuple target (``artifact, _ = helper()``)."""
    names = []
    for t in targets:
        tgt = t.target
        if position is None and isinstance(tgt, cst.Name):
            names.append(tgt.value)
        elif position is not None and isinstance(tgt, (cst.Tuple, cst.List)) and \
                position < len(tgt.elements) and isinstance(tgt.elements[position].value, cst.Name):
            names.append(tgt.elements[position].value.value)
        else:
            return []
    return names


def _statement(value: cst.BaseExpression) -> bool:
    """``update(M).where(M.id.in_(ids))`` (``sa.update``, a queryset's ``.update(..)``: its
    count): built from selected ids, not those rows."""
    return any(terminal(c) in ("update", "insert", "delete") for c in iter_calls(value))


class AssignFacts:
    """Assignments: new entities, mutations (blind, derived, counter, atomic), selections."""

    def assign(self, targets, value: cst.BaseExpression, node: cst.CSTNode) -> None:
        """``targets = value``: a read binds entities; otherwise querysets, checks kept in
        variables, taint, new objects and mutations of entity fields are recorded."""
        line = self.line(node)
        while isinstance(value, cst.Await):
            value = value.expression
        self.note_selection(targets, value, line)
        conditions.note_assign(self, targets, value)        # ``q = Q(...)``
        if self.assigned_read(targets, value, line):
            return
        qs_set = self.note_querysets(targets, value)
        self.calls_in(value)
        # a check kept in a variable: ``exists = M.objects.filter(..).exists()``
        check = self.check_kind(value)
        self.note_aggregate(targets, value, line)
        self.note_fetched(targets, value)
        for t in targets:
            tgt = t.target
            if isinstance(tgt, cst.Name):
                self.bind_name(tgt.value, value, check, qs_set)
            elif isinstance(tgt, cst.Attribute) and self.copied_as_new(tgt, value):
                continue
            elif isinstance(tgt, cst.Attribute):
                self.set_on_new_object(tgt, value)
                self.stored_aggregate(tgt, value, line)
                self.mutate_attr(tgt, value, line)
            elif isinstance(tgt, cst.Subscript):
                base = tgt.value
                if isinstance(base, cst.Attribute) and isinstance(base.value, cst.Name) and \
                        base.value.value in self.entities:
                    # ``x.settings[k] = v`` changes the column's old value in place
                    self.mutate(self.entities[base.value.value],
                                Mutation(line, base.attr.value, "derived", own=True))

    def assigned_read(self, targets, value: cst.BaseExpression, line: int) -> bool:
        """The value is a row: kept on the request, read by an ORM get, or returned by a
        loader the project shows. Binds the targets and says so."""
        kept = request_row(value)
        if kept is not None and all(isinstance(t.target, cst.Name) for t in targets):
            # a row an earlier step (middleware, dispatch) read and kept on the request
            for t in targets:
                self.new_entity(t.target.value, GetInfo(None, None, None, self.framework_hint()), line,
                                source="call").via = f"an earlier step (kept on `{kept}`)"
            return True
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
            return True
        got = self.from_helper(value) if isinstance(value, cst.Call) else row_streams.property_row(self, value)
        if got is not None and presence.note_assigned(self, targets, value, got):
            got = None                  # a lookup's answer, not a row: a check kept in a name
        names = _returned_names(targets, getattr(got[0], "position", None)) if got is not None else None
        if names:
            self.calls_in(value)
            for name in names:
                self.new_returned_entity(name, got, line)
            return True
        return False

    def note_querysets(self, targets, value: cst.BaseExpression) -> set[str]:
        """Querysets (not evaluated yet) and SQLAlchemy's lists of rows bound here; the
        names bound, so :meth:`bind_name` keeps them."""
        qs_set: set[str] = set()
        rows = self.sqla_rows(value)
        if rows is not None:
            for t in targets:
                if isinstance(t.target, cst.Name):
                    self.querysets[t.target.value] = rows
                    qs_set.add(t.target.value)
        kept_query = sqla_queries.note_kept(self, targets, value)     # ``query = session.query(M)``
        qs_set |= kept_query
        if kept_query or not (isinstance(value, (cst.Call, cst.Attribute)) or is_slice(value)):
            return qs_set
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
                    self.queryset_keys[t.target.value] = frozenset(names_in(value))
        return qs_set

    def note_fetched(self, targets, value: cst.BaseExpression) -> None:
        """Names bound to what a getter the linter cannot follow returned (``row =
        self._load(key)``, ``row, parent = await self._get_with_parent(..)``): rows that
        exist.  Any other binding of a name forgets it."""
        name = terminal(value) if isinstance(value, cst.Call) else ""
        fetched = bool(_GETTER.match(name)) and "_or_" not in name
        for t in targets:
            tgt = t.target
            names = [e.value for e in tgt.elements] if isinstance(tgt, (cst.Tuple, cst.List)) else [tgt]
            for name in names:
                if isinstance(name, cst.Name):
                    (self.fetched_rows.add if fetched else self.fetched_rows.discard)(name.value)

    def bind_name(self, n: str, value: cst.BaseExpression, check, qs_set: set[str]) -> None:
        """``n = value`` for a plain name: what ``n`` held is forgotten, what ``value``
        carries (a check, an alias of an entity, taint, a new object, a session) is kept."""
        if check:
            self.check_vars[n] = check + (models_in(value),)
            self.keep_lookup(n, value)
            if check[0] == "updated":
                self.update_relative[n] = self.update_is_relative(value)
        if isinstance(value, cst.Name) and value.value in self.entities:
            self.entities[n] = self.entities[value.value]          # alias
            return
        if n in self.entities and isinstance(value, cst.Name) and value.value == "None" and \
                presence.none_on_miss(self, n):
            return          # ``else: found = None``: the lookup's miss, on another branch
        if n in self.entities:
            del self.entities[n]
        if n not in qs_set:
            self.querysets.pop(n, None)
        keep_or_drop(self.taint, n, set() if request_object(value) else self.sources(value))
        keep_or_drop(self.field_taint, n, self.fields_read(value))
        made = self.constructed(value)
        keep_or_drop(self.new_objects, n, made)
        values = constructor_values(value) if made and isinstance(value, cst.Call) else None
        if values is None:
            self.new_object_values.pop(n, None)
        else:
            self.new_object_values[n] = values
        if isinstance(value, cst.Call) and "session" in dotted(value.func).lower():
            self.sessions.add(n)
        self.note_local(n, value)

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

    def set_on_new_object(self, tgt: cst.Attribute, value: cst.BaseExpression) -> None:
        """``obj.col = v`` on an object made here: a column its insert will set."""
        if isinstance(tgt.value, cst.Name) and tgt.value.value in self.new_object_values:
            self.new_object_values[tgt.value.value][tgt.attr.value] = value_origins(value)

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
        elif ent in self.sources(value) and not self.identity_value(value, ent) and \
                not self.kept_or_replaced(value, tgt, ent):
            kind = "derived"
        reads = {f for n, f in self.fields_read(value) if n == ent.name}
        if kind == "blind":
            reads.discard(attr)     # ``x.f = given or x.f``: its own value kept, nothing derived
        if ent.source == "self" and ent.name == "self":
            # ``self.expire = self.extended_until(plan)``: what the method reads of the row
            reads = self.mod.self_reads.expand(self.qualname.split(".", 1)[0], reads)
        own = attr in reads
        if own and kind == "blind":
            kind = "derived"
        self.mutate(ent, Mutation(line, attr, kind, own=own, constant=is_constant(value),
                                  reads=frozenset(reads)))

    def kept_or_replaced(self, value: cst.BaseExpression, tgt: cst.Attribute, ent: Entity) -> bool:
        """``x.f = reason or x.f`` (``reason if reason else x.f``): the field keeps the value
        read or takes one the row did not give.  Nothing new is made from the read: keeping a
        loaded value writes nothing under SQLAlchemy (an unchanged attribute is left out of the
        UPDATE), and under a full-row ``save()`` it is the write-back every column gets."""
        own = code_of(tgt)
        if isinstance(value, cst.BooleanOperation) and isinstance(value.operator, cst.Or):
            sides = [value.left, value.right]
        elif isinstance(value, cst.IfExp):
            sides = [value.body, value.orelse]
        elif _given_or_kept(value):
            # ``form.get("title", x.title)``, ``getattr(data, "title", x.title)``: the loaded
            # value is the default; the dict, the object and the key are the replacement
            if code_of(value.args[-1].value) != own:
                return False
            given = [value.args[0].value] if isinstance(value.func, cst.Name) else [value.func.value]
            return not any(ent in self.sources(side) for side in given + [a.value for a in value.args[:-1]])
        else:
            return False
        others = [side for side in sides if code_of(side) != own]
        return len(others) == 1 and ent not in self.sources(others[0])

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
                self.mutate(ent, Mutation(line, tgt.attr.value, kind, own=True))
        elif isinstance(tgt, cst.Subscript) and isinstance(tgt.value, cst.Attribute) and \
                isinstance(tgt.value.value, cst.Name) and tgt.value.value.value in self.entities:
            self.mutate(self.entities[tgt.value.value.value],
                        Mutation(line, tgt.value.attr.value, "derived", own=True))

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
            elif from_names and not _statement(value):      # ``ids = [t.id for t in rows]``
                self.selections[name] = dataclasses.replace(from_names[0], name=name)
            else:
                self.selections.pop(name, None)

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


def _given_or_kept(value: cst.BaseExpression) -> bool:
    """``d.get(key, default)`` or ``getattr(obj, name, default)``, the default last and positional."""
    if not isinstance(value, cst.Call) or any(a.keyword is not None or a.star for a in value.args):
        return False
    if isinstance(value.func, cst.Attribute):
        return value.func.attr.value == "get" and len(value.args) == 2
    return isinstance(value.func, cst.Name) and value.func.value == "getattr" and len(value.args) == 3
