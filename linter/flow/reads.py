"""Where entities come from: ORM gets, loaders, relations, SQLAlchemy row lists.

One part of :class:`.walk.FunctionAnalyzer`, the per-function walk; it only
records facts and hands verdicts to the rules.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Optional

import libcst as cst

from ..facts.config import name_matches
from ..facts.model import Entity
from ..facts.syntax import (
    DJANGO_GET_TERMINALS, MAYBE_NONE, ORM_MARKERS, SQLA_TERMINALS, chain, code_of, dotted,
    first_arg_name, is_model_name, lookup_columns, receiver_prefix, terminal)
from ..facts.values import lookup_values
from . import conditions, sqla_queries
from ..facts.module_facts import GetInfo
from ..facts.query_selection import state_columns
from .events import LockedRead, RowRead


@dataclasses.dataclass
class GetCall:
    """A call :meth:`ReadFacts.classify_get` is deciding about, taken apart once."""

    call: cst.Call
    term: str
    names: list
    calls: list
    root_name: str
    name: str
    for_update: bool
    typed_name: Optional[str] = None


def for_update_in(calls: list) -> bool:
    """Whether a chain locks what it reads: ``select_for_update()``, ``with_for_update()``,
    ``with_for_update=`` given, or ``execute(select(M).with_for_update())``."""
    for c in calls:
        if terminal(c) in ("select_for_update", "with_for_update"):
            return True
        for a in c.args:
            if a.keyword is not None and a.keyword.value == "with_for_update":
                return True
            if isinstance(a.value, cst.Call) and ("with_for_update" in dotted(a.value.func) or any(
                    terminal(cc) == "with_for_update" for cc in chain(a.value)[1])):
                return True
    return False


def selected_model(calls: list, through_session: bool) -> Optional[str]:
    """The model a SQLAlchemy chain selects: ``query(M)`` or ``execute(select(M))``."""
    sel_model = None
    for c in calls:
        t = terminal(c)
        if t == "query" and through_session:
            sel_model = first_arg_name(c) or sel_model
        if t in ("execute", "scalars", "scalar"):
            for a in c.args:
                if isinstance(a.value, cst.Call):
                    for cc in chain(a.value)[1]:
                        if terminal(cc) == "select":
                            sel_model = first_arg_name(cc) or sel_model
    return sel_model


class ReadFacts:
    """Where entities come from: ORM gets, loaders, relations, SQLAlchemy row lists."""

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
        self.emit(RowRead(line, tuple(self.stack), ent))
        self.taint.pop(name, None)
        self.params.pop(name, None)
        self.new_objects.pop(name, None)
        self.new_object_values.pop(name, None)
        self.querysets.pop(name, None)
        return ent

    def classify_get(self, call: cst.Call) -> Optional[GetInfo]:
        """The row read this call makes, if it is one: Django, SQLAlchemy, App Engine, or
        the project's own getters (``[tool.txnsafety] gets``)."""
        term = terminal(call)
        if not term:
            return None
        names, calls, root = chain(call)
        g = GetCall(call, term, names, calls, root.value if isinstance(root, cst.Name) else "",
                    dotted(call.func), for_update_in(calls))
        if term == "fetch_under_lock" or name_matches(g.name, {"fetch_under_lock"}):
            inner = call.args[0].value if call.args else None
            model = None
            if isinstance(inner, cst.Name) and inner.value in self.entities:
                model = self.entities[inner.value].model
            return self.get_info(g, model, "fetch_under_lock", None, locked=True)
        found = self.django_get(g)
        if found is not False:
            return found
        return self.sqla_get(g) or self.ndb_get(g) or self.project_get(g)

    def get_info(self, g: "GetCall", model, getter, fw, maybe_none=False, locked=False) -> GetInfo:
        """The read's facts: model, getter, a key naming the lookup (the session and any
        FOR UPDATE clause left out, so two reads of one row compare equal), columns."""
        key = code_of(g.call)
        key = re.sub(r"\.(select_for_update|with_for_update)\([^()]*\)", "", key)
        session = None
        if fw == "sqlalchemy":
            for n in g.names[:-1]:
                if "session" in n.lower() or n in self.sessions:
                    session = n
                    break
            session = session or g.typed_name
        if session:
            key = key.replace(session + ".", "<session>.", 1)
        info = GetInfo(model, getter or model or g.name, key, fw, for_update=g.for_update,
                       locked=locked, maybe_none=maybe_none)
        info.session = session
        info.lookup = lookup_columns(g.call)
        info.lookup_values = lookup_values(g.call)
        info.state = state_columns(g.call)
        return info

    def django_get(self, g: "GetCall"):
        """A Django read; ``False`` when the call is not a Django read at all, ``None``
        when it is a manager chain that does not return a row."""
        term, names, root_name = g.term, g.names, g.root_name
        if term == "get_object_or_404":
            return self.get_info(g, first_arg_name(g.call), None, "django")
        if term == "get_object" and root_name == "self" and len(names) == 2 and \
                "django" in self.mod.info.frameworks | set(self.vocab.frameworks):
            # a class-based view's (or DRF view's) row: read by get_object(), usually in
            # dispatch()/get_context_data() before the handler that writes it
            return self.get_info(g, self.mod.info.class_model(self.qualname.split(".", 1)[0]),
                                 "self.get_object", "django")
        if term in DJANGO_GET_TERMINALS and "get_queryset" in names and root_name == "self":
            return self.get_info(g, self.mod.info.class_model(self.qualname.split(".", 1)[0]), None,
                                 "django", maybe_none=term in ("first", "last"))
        if root_name in self.querysets and self.querysets[root_name].framework == "sqlalchemy":
            return sqla_queries.run(self.querysets[root_name], term,     # ``query.one()``
                                    lambda *a, **k: self.get_info(g, *a, **k))
        if self.manager_chain(names) or (root_name in self.querysets and len(names) >= 2):
            if term in DJANGO_GET_TERMINALS or term in ("get_or_404",):
                base = self.querysets.get(root_name)
                if base is not None and base.for_update:
                    g.for_update = True
                model = root_name if is_model_name(root_name) else (base.model if base else None)
                return self.get_info(g, model, None, "django", maybe_none=term in ("first", "last"))
            return None
        return False

    def sqla_get(self, g: "GetCall") -> Optional[GetInfo]:
        """A SQLAlchemy read: ``session.get(M, k)``, ``query(M)...first()``,
        ``execute(select(M)...).scalar_one()``, Flask-SQLAlchemy's ``M.query.get()``."""
        term, names, calls, root_name = g.term, g.names, g.calls, g.root_name
        sessionish = any("session" in n.lower() for n in names[:-1]) or (root_name in self.sessions)
        if not sessionish and term in SQLA_TERMINALS:
            typed = receiver_prefix(g.call)
            if self.typed_session(typed):
                sessionish = True
                g.typed_name = dotted(typed)
        first = first_arg_name(g.call)
        if term == "get" and (sessionish or root_name in ("db",)) and first \
                and is_model_name(first or "") and len(g.call.args) >= 2:
            return self.get_info(g, first, None, "sqlalchemy", maybe_none=True)
        if term in ("get_or_404", "first_or_404", "one_or_404") and root_name == "db":
            return self.get_info(g, first, None, "sqlalchemy")
        if term not in SQLA_TERMINALS:
            return None
        statement = self.kept_statement(calls) if sessionish else None
        if statement is not None:        # ``session.execute(stmt).scalar_one()``, ``stmt`` kept earlier
            g.for_update = g.for_update or statement.for_update
            info = self.get_info(g, statement.model, None, "sqlalchemy", maybe_none=term in MAYBE_NONE)
            info.lookup = info.lookup or statement.lookup
            info.lookup_values = info.lookup_values | statement.lookup_values
            info.state = info.state | statement.state
            return info
        sel_model = selected_model(calls, sessionish or "query" in names)
        if "query" in names and is_model_name(root_name) and sel_model is None:
            sel_model = root_name          # Flask-SQLAlchemy Model.query.get()
        if sel_model or (term != "get" and sessionish and
                         any(terminal(c) in ("execute", "scalars", "scalar", "query") for c in calls)):
            return self.get_info(g, sel_model, None, "sqlalchemy", maybe_none=term in MAYBE_NONE)
        return None

    def kept_statement(self, calls: list) -> Optional[GetInfo]:
        """The ``select(M)`` statement a name holds (``flow/sqla_queries.py``) when one of
        ``calls`` runs it: ``session.execute(stmt)``, ``session.scalars(stmt)``."""
        for c in calls:
            if terminal(c) in ("execute", "scalars", "scalar") and c.args and isinstance(c.args[0].value, cst.Name):
                kept = self.querysets.get(c.args[0].value.value)
                if kept is not None and kept.statement:
                    return kept
        return None

    def ndb_get(self, g: "GetCall") -> Optional[GetInfo]:
        """An App Engine read: ``key.get()``, ``ndb.Key(M, k).get()``, ``db.get(k)``,
        ``M.get_by_id(k)``."""
        term, names, calls, root_name = g.term, g.names, g.calls, g.root_name
        if term == "get" and (names[-2:-1] == ["key"] or any(terminal(c) == "Key" for c in calls[1:])):
            model = None
            for c in calls[1:]:
                if terminal(c) == "Key":
                    model = first_arg_name(c)
            return self.get_info(g, model, None, "ndb", maybe_none=True)
        if term == "get" and root_name == "db" and len(names) == 2:
            return self.get_info(g, None, "db.get", "ndb", maybe_none=True)
        owner = names[-2] if len(names) >= 2 else ""      # ``pkg.objects.Backup.get_by_id(...)``
        if term in ("get_by_id", "get_by_key_name", "get_or_insert") and is_model_name(owner):
            fw = "ndb" if "ndb" in self.mod.info.frameworks or owner == root_name else None
            return self.get_info(g, owner, None, fw, maybe_none=term != "get_or_insert")
        return None

    def project_get(self, g: "GetCall") -> Optional[GetInfo]:
        """The project's own getters (``gets`` in the settings) and ``Model.get_x(...)``."""
        if name_matches(g.name, self.vocab.gets):
            model = g.root_name if is_model_name(g.root_name) else None
            return self.get_info(g, model, g.name, None, maybe_none=True)
        if g.term.startswith("get_") and is_model_name(g.root_name) and len(g.names) == 2:
            return self.get_info(g, g.root_name, None, None, maybe_none=True)
        if g.term.startswith("get_") and len(g.names) == 3 and is_model_name(g.names[1]) and \
                g.root_name in self.mod.info.imports:      # ``network_obj.Segment.get_objects(..)``
            return self.get_info(g, g.names[1], None, None, maybe_none=True)
        return None

    def record_get(self, call: cst.Call, info: GetInfo) -> None:
        line = self.line(call)
        if info.for_update:
            self.emit(LockedRead(line, tuple(self.stack), info, call))
            self.row_locks.append((line, self.in_txn()))
            self.lock_models[line] = info.model
        elif info.locked:
            self.row_locks.append((line, None))

    def new_entity(self, name: str, info: GetInfo, line: int, source: str = "get") -> Entity:
        model = info.model
        if model == "cls" and self.is_method:
            model = self.qualname.split(".", 1)[0]      # ``cls.query.get(pk)`` in a classmethod
        ent = Entity(name, line, tuple(self.stack), source, model=model, getter=info.getter,
                     key=info.key, framework=info.framework, for_update=info.for_update,
                     locked_read=info.locked, maybe_none=info.maybe_none,
                     versioned=bool(model and model in self.mod.info.versioned),
                     session=getattr(info, "session", None), policy=self.mod.policy_of(model),
                     lookup=info.lookup, lookup_values=info.lookup_values, state=info.state)
        self.entities[name] = ent
        self.emit(RowRead(line, tuple(self.stack), ent))
        self.taint.pop(name, None)
        self.params.pop(name, None)
        self.types[name] = ""
        return ent

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
        self.emit(RowRead(ent.read_line, tuple(self.stack), ent))
        return ent

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

    # -- check-then-act (TXN105)
    def orm_query(self, call: cst.Call) -> bool:
        """Is ``call`` (an ``exists()`` / ``count()``) a database query, not a path or a list?"""
        if isinstance(call.func, cst.Name):
            # sqlalchemy's exists() / count(), unless the name comes from elsewhere
            # (``from itertools import count``: a Python counter)
            origin = self.mod.info.imports.get(call.func.value)
            return call.func.value in ("exists", "count") and (origin is None or "sqlalchemy" in origin[0])
        names, calls, root = chain(call)
        if any(n in ORM_MARKERS for n in names[:-1]):
            return True
        if isinstance(root, cst.Name) and root.value in self.querysets:
            return True
        return any(isinstance(a.value, cst.Call) and terminal(a.value) in ("select", "query")
                   for c in calls for a in c.args)
