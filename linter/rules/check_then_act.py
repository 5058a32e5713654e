"""TXN105 check-then-act: a check, then an act that is only right while the check still holds.

Two requests run the same check (``exists()`` is false, a count is under its limit, ``Max("n")``
gives the next number) before either acts, and both act: two rows where one was meant, a
limit exceeded, two invoices with one number.  The walk (``flow/``) records each check
as a :class:`~txnsafety_lint.facts.model.Check` and each act (an insert, a save, an update) as an
:class:`Act`; this module decides which earlier check an act depends on and whether anything
makes the pair atomic.

What makes it atomic, besides a lock or transaction the walk sees held across both:

* a **unique key** on the inserted row: the second insert fails with ``IntegrityError``
  instead of making a duplicate.  The key may be seen in the insert's own columns or, when the
  insert's values are not visible (``session.add(obj)``, ``add_all(objs)``), in the lookup
  the check made (``filter_by(a=..., b=...)``, ``session.get(M, id)``): an insert guarded by a
  miss on a unique key inserts that key;
* an ``IntegrityError`` handler around the act (the walk tells it with ``guarded``).

What an act depends on: a check whose ``if`` it is inside, or whose branch left the function
(``if exists: return``), or, once that ``if`` ended with both ways going on, a check whose
branches assigned a name the act uses (``if not found: obj = M(...)``, then ``add(obj)``).
A lookup in an ``if`` that only fills in something else is not the guard of a later insert.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import os

from ..facts.constraints import LIBRARY_KEYS, column, covered
from ..facts.model import Act, ActKind, Check, CheckKind, Confidence, Finding
from ..facts.syntax import CONTEXT_NAMES, columns_reading, is_model_name
from ..flow.events import Acted, AggregateStored, CallResolved
from .get_or_create import note_settled
from ..facts.module_facts import UNPROTECTED_POLICIES
from . import severity

if TYPE_CHECKING:
    from ..flow.state import FunctionState

#: every table's primary key is unique; ``pk`` and ``id`` are one spelling (``column()``)
PRIMARY_KEY = frozenset({"id"})


def depends_on(check: Check, act: Act, unprotected_policies: frozenset) -> Optional[bool]:
    """Whether ``act`` depends on ``check``: True, False, or None when the check is settled
    by the act without a finding (a limit the model's policy accepts)."""
    if check.used or check.suspended or check.line > act.line:
        return False
    if check.closed and not check.carried & act.names:
        return False            # the check's ``if`` is over and nothing it set reaches the act
    if act.kind == ActKind.DELETE:
        # ``if M.objects.count() >= LIMIT: oldest.delete()``: two prunes delete two rows
        return check.kind is CheckKind.COUNT and (act.model is None or not check.models or
                                                  act.model in check.models)
    if check.kind is CheckKind.AGGREGATE:
        return act.kind == ActKind.CREATE and bool(check.names & act.names)
    if check.kind.missing_row:
        if act.kind != ActKind.CREATE:
            return False        # a missing row, then a write of a row that exists: no duplicate
        if not check.models and check.keys is not None and not (check.keys - CONTEXT_NAMES) & act.names:
            return False        # a check of an unknown model that shares no value with the insert
    if check.kind is CheckKind.LIMIT:
        if act.kind not in (ActKind.SAVE, ActKind.UPDATE) or act.model is None or \
                act.model not in check.models:
            return False
        if act.entity is not None and check.subject is act.entity and \
                act.entity.policy in unprotected_policies:
            return None         # a limit on the row's own field, then its save: the policy accepts it
        return True
    return act.model is None or not check.models or act.model in check.models


def confidence(check: Check, act: Act, params: set) -> Confidence:
    """``LOW`` when the model checked or inserted is a class the caller passes
    (``def save_row(data, ModelClass)``) or one an object keeps (``self.classtype``, set by
    whoever built the repository): whether a unique key settles the race depends on the
    models the callers pass, which the function cannot show.  Not after an update that
    matched no row: no key settles that (:func:`conflict_settles`), whatever the model."""
    if check.kind is CheckKind.UPDATED:
        return Confidence.HIGH
    models = (set(check.models) | ({act.model} if act.model else set())) - {"self", "cls"}
    passed = models & params or any(not is_model_name(m) for m in models)
    return Confidence.LOW if passed else Confidence.HIGH


def unique_key_settles(check: Check, act: Act, unique_keys: "dict | _ModelKeys") -> bool:
    """A racing second insert fails on a unique key instead of making a duplicate.

    What counts is the check's own criterion: when the lookup's columns are known, a unique
    key (or the primary key) within them means two rows that both pass the check collide;
    a key on other columns does not (``filter_by(group=g)`` then an insert of ``(g, u)``
    under a ``(group, user)`` key lets two members in).  When the lookup is not visible,
    the insert's own columns decide, as they do for the model's declared keys.

    A count of the rows a lookup matches (``count() == 0``, ``count() > 0: raise``) is
    settled the same way: a key within its lookup lets at most one such row exist, and a
    key the code fixes lets only one insert succeed.  Not by the insert's columns alone:
    ``(event, holder)`` unique does not stop two holders passing the event's capacity."""
    counted = check.kind is CheckKind.COUNT
    if not (check.kind.missing_row or counted) or act.kind != ActKind.CREATE:
        return False
    target = _target(check, act)
    if target is None:
        return False
    declared = unique_keys.get(target, [])
    if _key_fixed_by_check(check, act, declared):
        return True
    if counted and check.lookup is None:
        return False
    if check.lookup is not None and (not check.models or target in check.models):
        looked_up = frozenset(map(column, check.lookup))
        if looked_up == PRIMARY_KEY and _primary_key_set_from_lookup(check, act, declared):
            return True         # ``session.get(Config, key)`` then ``Config(key=key)``: a primary key named otherwise
        if act.columns is not None and not looked_up <= frozenset(map(column, act.columns)):
            return False        # the insert does not set the key the check looked up
        candidates = declared + [PRIMARY_KEY]
        if counted:         # a count may filter on a joined model's ``id``: the row's own only if inserted
            given = act.columns if act.columns is not None else frozenset(act.values or ())
            candidates = [key for key in candidates if not key <= PRIMARY_KEY or "id" in set(map(column, given))]
        return any(key <= looked_up for key in candidates)
    if act.columns is None:
        # the insert's values are not visible: a key of the primary key alone settles nothing,
        # a new row gets a new id (an inherited ``id`` column must not settle every insert)
        declared = [key for key in declared if not key <= PRIMARY_KEY]
    return act.model is not None and covered(declared, act.columns)


def _target(check: Check, act: Act) -> Optional[str]:
    """The model an insert adds a row to: its own, else the one model the check looked up."""
    if act.model:
        return act.model
    model = next(iter(check.models)) if len(check.models) == 1 else None
    return model if model and is_model_name(model) else None   # not ``deleted_at`` of ``t.c.deleted_at``


def _key_fixed_by_check(check: Check, act: Act, declared: list) -> bool:
    """The insert sets every column of a declared unique key (not the primary key alone) to
    a value two requests that pass the same check cannot make differently: one the code
    fixes (``slug=DEFAULT_SLUG``) or one made only from what the check looked up
    (``topic=self`` after ``filter(topic_id == self.id)``, ``forum = self.forum``).  Both
    inserts then carry the same key and the second fails instead of duplicating the row.

    A column the insert does not show, or one made from anything else (``user=u`` after
    ``filter_by(group=g)``: two different users pass the check), decides nothing."""
    if act.values is None:
        return False
    looked_up = frozenset(map(column, check.lookup or ()))
    fixed = {column(c) for c, origins in act.values.items() if origins <= check.lookup_values}
    for key in declared:
        if key <= PRIMARY_KEY:
            continue
        if key <= fixed | (looked_up & {column(c) for c in act.values}):
            return True
    return False


def _computed_column_unique(check: Check, model: Optional[str], columns: frozenset,
                            unique_keys: "dict | _ModelKeys") -> bool:
    """An aggregate (``Max("number") + 1``) stored in a column a declared unique key covers
    (alone or with its scope: ``(tenant, number)``): two requests that compute the same number
    collide on the key instead of saving it twice, which is the fix the finding recommends."""
    if check.kind is not CheckKind.AGGREGATE or model is None or not columns:
        return False
    keys = [key for key in unique_keys.get(model, []) if not key <= PRIMARY_KEY]
    return any(column(c) in key for key in keys for c in columns)


def _primary_key_set_from_lookup(check: Check, act: Act, declared: list) -> bool:
    """A lookup by primary key (``session.get(M, value)``, ``get(pk=value)``) spells the key
    ``id`` whatever its column's name; an insert that sets a declared key of the model itself
    (the ``primary_key=True`` column ``key`` or ``code``, a unique column) collides with the
    row a racing request inserts for the same value, instead of duplicating it."""
    if act.columns is None:
        return False
    given = frozenset(map(column, act.columns))
    return any(key and not key <= PRIMARY_KEY and key <= given for key in declared)


def _columns_from(act: Act, names: set) -> frozenset:
    """The columns of an insert whose value is made from one of ``names``, for an object
    built before it is added (``v = Version(number=n + 1)``, then ``session.add(v)``)."""
    return frozenset(c for c, origins in (act.values or {}).items() if origins & names)


class _ModelKeys:
    """The project's unique keys, looked up under a model's imported name too
    (``from .models import Dataset as CtlDataset``: the keys are ``Dataset``'s).  A view
    over the project's table, not a copy: one is made at every act."""

    def __init__(self, keys: dict, imports: dict) -> None:
        self.keys = keys
        self.imports = imports

    def get(self, model, default=None):
        found = self.keys.get(model)
        if found is None and model in self.imports:
            module, name, _level = self.imports[model]
            found = self.keys.get(name) or LIBRARY_KEYS.get((module, name))
        return default if found is None else found

    def unseen(self, model: Optional[str], defined: frozenset) -> bool:
        """``model`` is a class no file of the project defines (``from galaxy.model import
        Tag`` in an app whose models live in another package), and no library key table
        knows it: whether a unique key settles an insert of it cannot be seen here."""
        if model is None or not is_model_name(model) or not defined or model in defined or \
                self.keys.get(model):
            return False        # ``self`` of a manager's ``self.create()`` names no class
        if model in self.imports:
            module, name, _level = self.imports[model]
            return name not in defined and (module, name) not in LIBRARY_KEYS
        return True


def model_keys(fa: "FunctionState") -> _ModelKeys:
    """:class:`_ModelKeys` for the function's module (its ``from ... import X as Y``)."""
    return _ModelKeys(fa.mod.cfg.unique_keys, fa.mod.info.imports)


def conflict_settles(check: Check, unique_key: bool, in_integrity_handler: bool,
                     handler_reapplies: bool) -> bool:
    """Whether the database's refusal of a duplicate makes the pair safe.

    For a missing row (``exists()`` false, ``DoesNotExist``), a unique key or an
    ``IntegrityError`` handler does: the loser's insert fails and the winner's row is the
    one both wanted.  Not after an update that matched no row (``if not
    qs.update(n=F("n") + 1): M.objects.create(n=1)``): the loser's insert fails too, but
    its change (the increment) goes with it, unless the handler applies it again to the
    row the winner inserted (``except IntegrityError: qs.update(n=F("n") + 1)``), or the
    update sets plain values the winner's row already holds (``check.relative`` false: a
    savepoint get-or-create behind a no-op ``UPDATE`` that only takes the writer lock)."""
    if check.kind is CheckKind.UPDATED:
        # an update to plain values loses nothing when its insert fails: the racing row holds them
        return handler_reapplies or (not check.relative and (unique_key or in_integrity_handler))
    return unique_key or in_integrity_handler


def message(check: Check, act: Act, framework: Optional[str]) -> str:
    if check.kind is CheckKind.AGGREGATE:
        fix = ("declare a unique constraint on the computed column (with its scope) and retry on "
               "IntegrityError, or lock the parent row before computing it")
    elif check.kind is CheckKind.UPDATED:
        fix = ("make it one upsert (bulk_create(update_conflicts=True), INSERT ... ON CONFLICT DO "
               "UPDATE), or catch IntegrityError around the insert and run the update again")
    elif check.kind.missing_row:
        fix = {"django": "use get_or_create()/update_or_create(), or a unique constraint and "
                         "catch IntegrityError around the create",
               "ndb": "use get_or_insert() or do both in @ndb.transactional",
               }.get(framework, "insert first and catch IntegrityError (a unique constraint, "
                                "INSERT ... ON CONFLICT), or get_or_create()")
    else:
        fix = {"ndb": "do the check and the write in @ndb.transactional",
               "sqlalchemy": "lock the parent row with with_for_update() before the check, or make "
                             "the write a conditional UPDATE ... WHERE"}.get(
            framework, "lock the parent row with select_for_update() inside transaction.atomic() "
                       "before the check, or make the write a conditional UPDATE ... WHERE")
    verb = "read" if check.kind is CheckKind.AGGREGATE else "checked"
    return (f"TXN105 check-then-act: {check.what} {verb} at line {check.line}, then {act.what} at "
            f"line {act.line} with nothing making the pair atomic; {fix}")


def stored_aggregate_message(check: Check, target: str, line: int) -> str:
    """An aggregate stored on the row a model method prepares for its caller's save."""
    return (f"TXN105 check-then-act: {check.what} read at line {check.line}, then stored in "
            f"`{target}` at line {line} for the row's save, with nothing making the pair atomic; "
            f"declare a unique constraint on the computed column (with its scope) and retry on "
            f"IntegrityError, or take the number from a database sequence")


def on_act(fa: "FunctionState", event: Acted) -> None:
    """TXN105 at an act: the latest open check it depends on, unless a unique key, an
    ``IntegrityError`` handler that applies the change again, a write already reported on
    the line, or a lock held since the check settles the pair (subscribed to ``ACT``)."""
    act, node = event.act, event.node
    pending = []
    for c in fa.checks:
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
    if check.lookup_values & fa.minted():
        return          # a key this function just made: no other request looks it up
    keys = model_keys(fa)
    unique = unique_key_settles(check, act, keys) or \
        _computed_column_unique(check, act.model, columns_reading(node, check.names) | _columns_from(act, check.names),
                                keys)
    if unique and check.kind in (CheckKind.EXISTS, CheckKind.NONE):
        note_settled(fa, check, act, node)    # the get-or-create contract: a row found or made
    if conflict_settles(check, unique, fa.integrity_depth > 0, fa.reapplying_depth > 0):
        return
    if act.line in fa.reported_write_lines:
        return
    if check.locked and {id(s) for s in check.stack} <= {id(s) for s in event.scopes}:
        return
    sure = confidence(check, act, set(fa.param_order))
    if check.kind.missing_row and act.kind == ActKind.CREATE and \
            keys.unseen(_target(check, act), fa.mod.cfg.defined_classes):
        sure = Confidence.LOW       # another package's model: its unique keys are not in view
    fa.report(node, "TXN105", message(check, act, fa.framework_hint()), assessment=severity.of_check(check, act),
              confidence=sure)


def on_aggregate_stored(fa: "FunctionState", event: AggregateStored) -> None:
    """``self.number = last + 1`` in a model method (``clean()``, ``save()``): the value the
    row will be saved with comes from an aggregate read just before; the save is the
    caller's, so the finding is where the value is stored (subscribed to ``AGGREGATE_STORED``)."""
    held = {id(s) for s in event.scopes}
    model = fa.qualname.split(".", 1)[0] if fa.is_method else None
    for check in fa.checks:
        if check.kind is CheckKind.AGGREGATE and not check.used and check.names & event.used and \
                not (check.locked and {id(x) for x in check.stack} <= held):
            check.used = True
            if _computed_column_unique(check, model, frozenset({event.target.attr.value}), model_keys(fa)):
                return      # the column is declared unique: a racing save fails instead of repeating it
            target = f"self.{event.target.attr.value}"
            fa.report(event.target, "TXN105", stored_aggregate_message(check, target, event.line),
                      assessment=severity.of_check(check, None, (event.target.attr.value,)))
            return


def on_call_resolved(fa: "FunctionState", event: CallResolved) -> None:
    """TXN105 at a call whose callee inserts (``self._create_token(...)`` after ``if not
    previous:``): the caller's check, as it stood at the call, and the callee's insert
    (subscribed to ``CALL_RESOLVED``; ``fa`` is the caller)."""
    site, callee = event.site, event.callee
    if site.guarded or not site.checks or not callee.creates:
        return
    if callee.is_method != site.on_self or (callee.is_method and
                                            callee.qualname.split(".")[0] != fa.qualname.split(".")[0]):
        return      # only a module function, or a method of this class called on ``self``
    c_line, model = callee.creates[0]
    where = "line" if callee.mod is fa.mod else \
        f"{os.path.basename(callee.mod.filename) or 'another module'} line"
    act = Act(site.line, f"`{callee.name}()` (inserting at {where} {c_line})", ActKind.CREATE,
              model, site.names, None, None)
    pending = [c for c in site.checks if depends_on(c, act, UNPROTECTED_POLICIES)]
    if not pending:
        return
    check = pending[-1]
    if unique_key_settles(check, act, model_keys(fa)) or \
            (check.locked and {id(s) for s in check.stack} <= {id(s) for s in site.stack}):
        return
    if fa.mod.cfg.code_enabled("TXN105"):
        judged = severity.of_check(check, act)
        fa.mod.add(Finding(site.line, site.col, "TXN105", message(check, act, fa.framework_hint()),
                           severity=judged.severity, severity_reason=judged.reason))
