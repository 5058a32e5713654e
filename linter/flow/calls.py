"""Calls: writes, inserts, deletes, row locks, call sites kept for project summaries, claims.

One part of :class:`.walk.FunctionAnalyzer`, the per-function walk; it only
records facts and emits events.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Optional

import libcst as cst

from ..facts.config import name_matches
from ..facts.model import Mutation, Scope
from ..facts.syntax import (
    DJANGO_GET_TERMINALS, MUTATING_METHODS, SQLA_TERMINALS, chain, code_of, dotted, first_arg_name,
    is_model_name, kwarg, label, may_write_row, names_in, terminal)
from ..facts.module_facts import GetInfo
from ..facts.provenance import relation_change
from .events import Called, SelectedRowsUpdated, SideEffect
from ..facts.query_selection import condition_names, is_constant, set_values, state_columns

from .reads import for_update_in
from .records import CallSite
from .switches import passed


#: class-name endings of objects whose ``save()`` inserts a row (DRF serializers, ModelForms)
_FORM_CLASSES = ("Serializer", "Form")

#: a row picked by its position (what a prune deletes)
_PICKED = frozenset({"first", "last", "earliest", "latest"})

#: methods named for storing what they are given (a repository's or service's insert)
_STORING = re.compile(r"^(?:save|store|persist|insert|create|add)(?:_\w+)?$")

#: calls that only record something: a row passed to them is not work done with it
_LOGGING = re.compile(r"^(?:print|warn|log|logger|logging|_?log\w*|\w+\.(?:debug|info|warning|warn|error|"
                      r"exception|critical|log))$|^(?:self\.)?(?:logger|log|_logger|_log|LOGGER|LOG)\.")

#: database advisory locks, called (``func.pg_advisory_xact_lock(k)``) or spelled in SQL
#: (``text("SELECT pg_advisory_xact_lock(:k)")``, ``cursor.execute("SELECT GET_LOCK(%s, 10)")``)
_ADVISORY = re.compile(r"\b(pg_(?:try_)?advisory(?:_xact)?_lock|GET_LOCK|sp_getapplock)\b", re.I)

#: calls :meth:`CallFacts.queryset_act` looks at (the others skip its chain walk)
_QUERYSET_ACTS = frozenset({"create", "bulk_create", "update", "delete", "execute"})


@dataclasses.dataclass
class CallParts:
    """What every call handler looks at: the method or function name (``term``), the
    dotted callee, its receiver, and the receiver's name when it is a plain name or a
    related row (``order.user.plan``)."""

    term: str
    name: str
    recv: Optional[cst.BaseExpression]
    recv_name: Optional[str]


class CallFacts:
    """Calls: writes, inserts, deletes, row locks, call sites kept for project summaries, claims."""

    # -- calls
    def call(self, call: cst.Call) -> None:
        """One call, in statement order: the facts it records come from the first
        handler that recognises it (a re-read, a write, an insert, a queryset act, a
        field mutation); anything else may be a call site for the project summaries."""
        term = terminal(call)
        if not term:
            return
        func = call.func
        recv = func.value if isinstance(func, cst.Attribute) else None
        parts = CallParts(term, dotted(func), recv, recv.value if isinstance(recv, cst.Name) else None)
        if term in ("update", "values") and self.selections:
            self.update_claim(call)
        if self.claims or self.update_claims:     # work done with rows counts only after their claim
            self.note_handed_on(call, parts.name)
        if parts.recv_name is None and recv is not None and self.relation_entity(recv) is not None:
            parts.recv_name = dotted(recv)      # ``order.user.plan.save()``: a related row
        self.locked_read_unassigned(call, parts)
        self.advisory_lock(call)
        self.side_effect(call, parts)
        self.emit(Called(self.line(call), tuple(self.stack), call))   # work done with a row, or the row consumed
        for handler in (self.reread, self.entity_write, self.session_write, self.new_row_write,
                        self.queryset_act, self.field_mutation):
            if handler(call, parts):
                return
        if _STORING.match(term) and isinstance(func, cst.Attribute):
            self.stores_new_object(call)
        # calls to functions of this module (resolved after all functions are seen), and
        # methods called on a row (``order.user.plan.extend()`` too)
        if isinstance(func, cst.Name) or (parts.recv_name is not None):
            self.record_call_site(call, term, parts.recv_name)

    def advisory_lock(self, call: cst.Call) -> None:
        """An advisory lock taken by a statement, not a ``with``: what follows in the function
        runs under it (a transaction-scoped one is held to the commit, a session one to its
        unlock; the walk cannot see either end, so it holds to the function's end).  Two
        requests that take it with the same key serialise their check and their act."""
        spelled = terminal(call)
        if not _ADVISORY.fullmatch(spelled):
            first = call.args[0].value if call.args else None
            found = _ADVISORY.search(first.evaluated_value or "") \
                if isinstance(first, cst.SimpleString) and isinstance(first.evaluated_value, str) else None
            if found is None:
                return
            spelled = found.group(1)
        self.enter(Scope("lock", f"an advisory lock (`{spelled}`)", self.line(call)))

    def locked_read_unassigned(self, call: cst.Call, parts: "CallParts") -> None:
        """An evaluated ``select_for_update()`` / ``with_for_update()`` read that is not assigned."""
        if parts.term in DJANGO_GET_TERMINALS | SQLA_TERMINALS or parts.term == "get_object_or_404":
            info = self.classify_get(call)
            if info is not None and (info.for_update or info.locked):
                self.record_get(call, info)
        elif parts.term == "execute" and call.args and for_update_in([call]) and self.in_txn() is not None:
            # ``sess.execute(select(table.c.id).where(..).with_for_update()).fetchone()``: a
            # Core read whose rows no getter names still locks them to the transaction's end
            self.row_locks.append((self.line(call), self.in_txn()))

    def side_effect(self, call: cst.Call, parts: "CallParts") -> None:
        """TXN107: a side effect inside a transaction that can be retried or roll back."""
        if not name_matches(parts.name, self.vocab.side_effects) or self.is_write_name(parts.term) or \
                self.transactional_task(call):
            return
        self.emit(SideEffect(self.line(call), tuple(self.stack), parts.name, call))

    def reread(self, call: cst.Call, parts: "CallParts") -> bool:
        """``x.refresh_from_db()`` / ``session.refresh(x)``: the entity is read again."""
        term, recv, recv_name = parts.term, parts.recv, parts.recv_name
        if term == "refresh_from_db" and recv_name in self.entities:
            old = self.entities[recv_name]
            ent = self.new_entity(recv_name, GetInfo(old.model, old.getter, old.key, old.framework),
                                  self.line(call))
            ent.source = "get"
            ent.policy = ent.policy or old.policy
            if "." in recv_name and any(txn is not None and id(txn) in self.stack_ids()
                                        for _l, txn in self.row_locks):
                ent.for_update = True       # re-read after this transaction locked the rows
            return True
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
                return True
        return False

    def entity_write(self, call: cst.Call, parts: "CallParts") -> bool:
        """``x.save()`` / ``x.put()`` of an entity, ``db.put([x, y])``, a repository's ``save(new)``."""
        term, recv_name = parts.term, parts.recv_name
        if term == "save" and call.args and call.args[0].keyword is None and \
                self.new_objects.get(code_of(call.args[0].value)):
            self.stores_new_object(call)    # ``self.save(datum)``: a repository's insert
            return True
        if recv_name in self.entities and (term in ("save", "put", "put_async") or
                                           (name_matches(term, self.vocab.puts) and term != "put_multi")):
            ent = self.entities[recv_name]
            if term == "save":
                fields = self.update_fields(call)
                kind = "whole" if fields is False else "fields"
                self.write(ent, call, kind, None if fields in (False, True) else fields,
                           verb="saved")
            else:
                self.write(ent, call, "whole", None, verb="put")
            self.act(call, f"`{recv_name}.{term}()`", ent.model, "save", entity=ent)
            return True
        if term in ("put", "put_multi", "put_async", "put_multi_async") and recv_name in ("db", "ndb") \
                and call.args:
            arg = call.args[0].value
            items = [e.value for e in arg.elements] if isinstance(arg, (cst.List, cst.Tuple)) else [arg]
            for it in items:
                if isinstance(it, cst.Name) and it.value in self.entities:
                    self.write(self.entities[it.value], call, "whole", None, verb="put")
            self.act(call, f"`{parts.name}()`", None, "save")
            return True
        return False

    def session_write(self, call: cst.Call, parts: "CallParts") -> bool:
        """A session's ``commit()`` / ``flush()`` writes what it holds; ``add()`` inserts."""
        term, recv = parts.term, parts.recv
        if recv is None or term not in ("commit", "flush", "add", "add_all") or not self.is_session(recv):
            return False
        if term in ("commit", "flush"):
            self.flush_all(call, verb=f"flushed by `{code_of(call.func)}()`", session=dotted(recv))
            if term == "commit":
                self.release_row_locks(self.line(call))
            return True
        model = None
        if call.args:
            arg = call.args[0].value
            if term == "add" and isinstance(arg, cst.Name) and arg.value in self.entities:
                # an entity read earlier joins this session: its changes flush with it
                self.entities[arg.value].session = dotted(recv)
                return True
            if term == "add" and isinstance(arg, cst.Name) and arg.value in self.fetched_rows:
                return True     # a row a getter returned joins the session: no insert
            if term == "add" and isinstance(arg, cst.Attribute) and \
                    dotted(arg).split(".", 1)[0] in self.entities:
                return True     # ``session.add(node.current)``: a row read with ``node`` joins, no insert
            if isinstance(arg, cst.Call):
                made = dotted(arg.func).rsplit(".", 1)[-1]
                model = made if is_model_name(made) else None   # ``add(new_account(e))``: a helper's row
            elif isinstance(arg, cst.Name):
                model = self.new_objects.get(arg.value)
        self.act(call, f"`{code_of(call.func)}()`", model, "create")
        return True

    def new_row_write(self, call: cst.Call, parts: "CallParts") -> bool:
        """``obj.save()`` of an object made here, or ``Model(...).save()``: an insert."""
        term, recv, recv_name = parts.term, parts.recv, parts.recv_name
        if term not in ("save", "put", "create"):
            return False
        if recv_name in self.new_objects:
            made = self.new_objects[recv_name]
            # a form's or serializer's save() inserts a row of a model it does not name
            model = None if made.endswith(_FORM_CLASSES) or made == "object" else made
            self.act(call, f"`{recv_name}.{term}()` of a new object", model, "create")
            return True
        if term != "create" and isinstance(recv, cst.Call) and is_model_name(dotted(recv.func).rsplit(".", 1)[-1]):
            self.act(call, f"`{dotted(recv.func)}(...).{term}()`",
                     dotted(recv.func).rsplit(".", 1)[-1], "create")
            return True
        return False

    def queryset_act(self, call: cst.Call, parts: "CallParts") -> bool:
        """Inserts, updates and deletes through a manager or queryset, or an executed
        ``insert()`` / ``update()`` statement."""
        term = parts.term
        if term not in _QUERYSET_ACTS:
            return False
        names, _calls, root = chain(call)
        on_manager = self.manager_chain(names)
        on_queryset = isinstance(root, cst.Name) and root.value in self.querysets
        if term in ("create", "bulk_create") and (on_manager or on_queryset):
            if kwarg(call, "ignore_conflicts") is None and kwarg(call, "update_conflicts") is None:
                self.act(call, f"`{label(call.func)}()`",
                         root.value if isinstance(root, cst.Name) else None, "create")
            return True
        if term == "update" and (on_manager or on_queryset):
            model = root.value if isinstance(root, cst.Name) else None
            if model in self.querysets:
                model = self.querysets[model].model
            self.act(call, f"`{label(call.func)}()`", model, "update")
            return True
        if term == "delete" and _PICKED.intersection(names) and on_manager:
            # ``M.objects.order_by("t").first().delete()``: pruning to a limit is an act
            self.act(call, f"`{label(call.func)}()`",
                     root.value if isinstance(root, cst.Name) and is_model_name(root.value) else None,
                     "delete")
            return True
        if term == "execute" and call.args and isinstance(call.args[0].value, cst.Call):
            inner = call.args[0].value
            inner_names = [terminal(c) for c in chain(inner)[1]]
            if inner_names and inner_names[-1] in ("insert", "update") and not any(
                    t.startswith("on_conflict") or t == "prefix_with" for t in inner_names):
                stmt = [c for c in chain(inner)[1] if terminal(c) in ("insert", "update")][-1]
                self.act(call, f"`{dotted(inner.func)}`", first_arg_name(stmt),
                         "create" if terminal(stmt) == "insert" else "update")
            return True
        return False

    def field_mutation(self, call: cst.Call, parts: "CallParts") -> bool:
        """``setattr(x, "f", v)`` and in-place changes of a field (``x.tags.append(t)``)."""
        term, recv = parts.term, parts.recv
        if term == "setattr" and len(call.args) >= 2:
            tgt = call.args[0].value
            if isinstance(tgt, cst.Name) and tgt.value in self.entities:
                attr = call.args[1].value
                aname = attr.value.strip("'\"") if isinstance(attr, cst.SimpleString) else "?"
                kind = "derived" if len(call.args) > 2 and \
                    self.entities[tgt.value] in self.sources(call.args[2].value) else "blind"
                self.mutate(self.entities[tgt.value], Mutation(self.line(call), aname, kind))
            return True
        if term in MUTATING_METHODS and isinstance(recv, cst.Attribute) and \
                isinstance(recv.value, cst.Name) and recv.value.value in self.entities:
            ent = self.entities[recv.value.value]
            if relation_change(self.mod.cfg.relations, ent.model, recv.attr.value, call,
                               self.new_objects):
                return True     # rows of another table (a link, a child), not a column
            self.mutate(ent, Mutation(self.line(call), recv.attr.value, "derived", own=True))
            return True
        return False

    @staticmethod
    def transactional_task(call: cst.Call) -> bool:
        for key in ("transactional", "_transactional"):
            v = kwarg(call, key)
            if isinstance(v, cst.Name) and v.value == "True":
                return True
        return False

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
        if receiver is not None and may_write_row(term):
            self.write_lines.append(self.line(call))      # ``row.method()`` may write the row
        live = [e for e in set(self.entities.values()) if e.source not in ("param", "self")]
        site = CallSite(term, self.line(call), self.col(call), tuple(self.stack), args, live,
                        self, receiver, module_alias)
        site.checks = tuple(dataclasses.replace(c) for c in self.checks if not c.used)
        site.on_self = recv_name == "self" and self.is_method
        site.guarded = self.integrity_depth > 0
        site.names = frozenset(names_in(call))
        site.passed = passed(call)
        site.switches = frozenset(self.switches_on)
        self.mod.call_sites.append(site)

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

    def note_handed_on(self, call: cst.Call, name: str) -> None:
        """Rows passed to a call that is not logging (``run(task)``, ``out.append(task.pk)``)."""
        if _LOGGING.match(name):
            return
        line = self.line(call)
        for arg in call.args:
            for n in names_in(arg.value):
                if n in self.entities or n in self.querysets or n in self.selections:
                    self.handed_on.append((line, n))

    def update_claim(self, call: cst.Call) -> None:
        """An update of rows a variable selected by state, setting columns (TXN105 when it sets
        that state back: ``rules/claim.py``)."""
        values = set_values(call)
        if not values:
            return
        names = sorted(condition_names(call) & set(self.selections))
        if names:
            self.emit(SelectedRowsUpdated(self.line(call), tuple(self.stack), call,
                                          tuple(self.selections[n] for n in names), frozenset(values),
                                          frozenset(state_columns(call)),
                                          frozenset(c for c, v in values.items() if is_constant(v))))
