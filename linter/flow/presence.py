"""A check that lives in a helper: what a function's return value says about a lookup.

Check-then-act split over two functions is the common shape in layered code: a repository,
DAO or service helper looks a row up and the caller acts on the answer.

* ``project = repo.find_by_external_id(pid)`` returns the row, or None when the lookup
  missed (``except NoResultFound: entity = None``): the row itself, an entity with
  ``maybe_none`` (``records.Returned``, nothing here).
* ``segment = get_dynamic_segment(ctx, net)`` returns something made from the rows it looked
  up (``_make_dict(objs[0])``), or nothing: a :class:`Presence` of kind ``NONE``, falsy
  exactly when no row matched.
* ``if has_vote(user, poll):`` calls a helper that returns ``...exists()`` (or ``x is not
  None``): a :class:`Presence` of kind ``EXISTS``.

A helper's :class:`Presence` is its summary (kept where a loader's ``Returned`` is,
``FunctionAnalyzer.returned``, so the helpers of other modules and methods of any receiver
resolve as loaders do); at the caller a test of the returned value is a missing-row check
on the helper's model and lookup (``rules/check_then_act.py`` pairs it with an insert, the
caller's own or a callee's).

The get-or-create contract (a unique key settles the insert, but the function promises
the row) is a rule of its own: ``rules/get_or_create.py``; it keeps what it needs in
``State.settled``.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Optional

import libcst as cst

from ..facts.model import CheckKind
from ..facts.syntax import code_of, exits, iter_calls, kids, maybe_models, models_in, names_in

from .records import HelperChecks as State  # noqa: F401  (re-exported: the walk's record)

if TYPE_CHECKING:
    from .state import FunctionState

__all__ = ["Presence", "State", "call_check", "finish", "found_test", "none_on_miss", "note_assigned",
           "note_return"]


@dataclasses.dataclass(frozen=True)
class Presence:
    """A function's return value as the answer of a lookup it made.

    ``NONE``: falsy exactly when the lookup found no row (something made from the row, or
    None); ``EXISTS``: true when a row matched.  ``derived``: a value made from the rows
    (it must also be able to return None, checked when the walk ends)."""

    kind: CheckKind
    models: frozenset
    lookup: Optional[frozenset]
    line: int
    derived: bool = False


def none_on_miss(fa: "FunctionState", name: str) -> bool:
    """``row = None`` where ``row`` holds a lookup's row: True when the name still means "the
    row, or None" (the lookup may miss, or this is its miss handler), marking it so."""
    ent = fa.entities[name]
    if fa.helper_checks.missing and not ent.maybe_none:
        ent.maybe_none = True
    return ent.maybe_none


# -- the helper's side: its summary

def note_return(fa: "FunctionState", value: cst.BaseExpression) -> bool:
    """Set ``fa.returned`` to a :class:`Presence` when ``return value`` answers a lookup;
    True when it did (the loader summary is then not looked for)."""
    while isinstance(value, cst.Await):
        value = value.expression
    line = fa.line(value)
    if isinstance(value, cst.Call):
        got = fa.from_helper(value)
        if got is not None and isinstance(got[0], Presence):
            fa.returned = dataclasses.replace(got[0], line=line)     # ``return has_x(..)``
            return True
        if got is not None or fa.classify_get(value) is not None:
            return False                                            # the row itself
    kind = _exists_answer(fa, value)
    if kind is not None:
        fa.returned = Presence(CheckKind.EXISTS, kind[0], kind[1], line)
        return True
    if isinstance(value, cst.Name):
        return False
    for n in sorted(names_in(value)):
        ent = fa.entities.get(n)
        if ent is not None and ent.source in ("get", "call") and ent.maybe_none:
            fa.returned = Presence(CheckKind.NONE, maybe_models(ent.model), ent.lookup,
                                   ent.read_line, derived=True)
            return True
    return False


def _exists_answer(fa: "FunctionState", value: cst.BaseExpression) -> Optional[tuple]:
    """(models, lookup) when ``value`` is true exactly when a row matched: ``q.exists()``,
    ``x is not None`` / ``bool(x)`` of a lookup that may miss."""
    found = fa.check_kind(value)
    if found is not None and found[0] == "exists":
        return models_in(value), fa.lookup_of(value)
    subject = None
    if isinstance(value, cst.Comparison) and len(value.comparisons) == 1 and \
            isinstance(value.comparisons[0].operator, cst.IsNot) and \
            code_of(value.comparisons[0].comparator) == "None":
        subject = value.left
    elif isinstance(value, cst.Call) and code_of(value.func) == "bool" and len(value.args) == 1:
        subject = value.args[0].value
    if isinstance(subject, cst.Name) and subject.value in fa.entities:
        ent = fa.entities[subject.value]
        if ent.maybe_none and ent.source in ("get", "call"):
            return maybe_models(ent.model), ent.lookup
    return None


def _may_return_none(node: cst.FunctionDef) -> bool:
    """Whether the function can return None: ``return``, ``return None``, or a body that
    can run off its end."""
    if not exits(node.body):
        return True
    stack = list(node.body.body) if hasattr(node.body, "body") else []
    while stack:
        n = stack.pop()
        if isinstance(n, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        if isinstance(n, cst.Return) and (n.value is None or code_of(n.value) == "None"):
            return True
        stack.extend(kids(n))
    return False


# -- the caller's side: a test of the answer is a missing-row check

def _what(helper: str, p: Presence, filename: str) -> str:
    where = f"{filename} " if filename else ""
    return f"`{helper}()` ({where}line {p.line})"


def note_assigned(fa: "FunctionState", targets, value: cst.BaseExpression, got: tuple) -> bool:
    """``seg = get_dynamic_segment(..)``: the variable holds the helper's answer, a check
    kept in a variable (``check_vars``); True when ``got`` is a :class:`Presence` (the
    name then holds no row)."""
    p, helper, filename = got
    if not isinstance(p, Presence):
        return False
    keys = names_in(value)
    for t in targets:
        if isinstance(t.target, cst.Name):
            n = t.target.value
            what = f"`{n}` (what {_what(helper, p, filename)} found)" if p.kind is CheckKind.NONE \
                else f"`{n}` (whether {_what(helper, p, filename)} found a row)"
            fa.check_vars[n] = (p.kind.value, what, p.models)
            fa.check_keys[n] = keys
            fa.check_lookups[n] = p.lookup
            fa.helper_checks.names.add(n)
    return True


def call_check(fa: "FunctionState", test: cst.BaseExpression) -> Optional[tuple]:
    """``if not has_vote(user, poll):``: (kind, what, models) for a test that calls a
    helper answering a lookup."""
    for call in iter_calls(test):
        got = fa.from_helper(call)
        if got is not None and isinstance(got[0], Presence):
            p, helper, filename = got
            return (p.kind.value, f"a row looked up by {_what(helper, p, filename)}", p.models)
    return None


def found_test(fa: "FunctionState", node: cst.CSTNode) -> bool:
    """Whether ``node`` (a test's operand) is true when the helper found the row: the
    ``if`` body is then the branch where the row exists."""
    if isinstance(node, cst.Name):
        return node.value in fa.helper_checks.names
    if isinstance(node, cst.Call):
        got = fa.from_helper(node)
        return got is not None and isinstance(got[0], Presence)
    return False


def finish(fa: "FunctionState") -> None:
    """When the walk has ended: drop a derived answer that never returns None (it answers
    nothing)."""
    if isinstance(fa.returned, Presence) and fa.returned.derived and not _may_return_none(fa.node):
        fa.returned = None
