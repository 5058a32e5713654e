"""A check that lives in a helper: what a function's return value says about a lookup.

Check-then-act split over two functions is the common shape in layered code: a repository,
DAO or service helper looks a row up and the caller acts on the answer.

* ``project = repo.find_by_external_id(pid)`` returns the row, or None when the lookup
  missed (``except NoResultFound: entity = None``): the row itself, an entity with
  ``maybe_none`` (``dataflow.Returned``, nothing here).
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

The same module holds the **get-or-create contract**: a unique key turns a racing insert
into an ``IntegrityError`` (``unique_key_settles``), which is no duplicate; but a function
named for the contract (``get_or_create_project``) that returns the row it found or the row
it made promises its caller a row, and the racing call gets the exception instead (Django's
``get_or_create()`` catches it and reads the row again for this reason).  Such an insert,
unguarded, is reported at ``MEDIUM`` confidence.
"""
from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, Optional

import libcst as cst

from ..facts.model import Check, CheckKind, Confidence
from ..facts.syntax import code_of, exits, iter_calls, kids, maybe_models, models_in, names_in, walk_nodes

if TYPE_CHECKING:
    from .walk import FunctionAnalyzer
    from ..facts.model import Act

__all__ = ["Presence", "State", "call_check", "finish", "found_test", "none_on_miss", "note_assigned",
           "note_return", "note_settled"]


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


@dataclasses.dataclass
class State:
    """What the walk of one function keeps for this module."""

    #: (check, act, call node) of inserts a unique key settled (the get-or-create contract)
    settled: list = dataclasses.field(default_factory=list)
    #: names holding a helper's :class:`Presence` (a check kept in a variable)
    names: set = dataclasses.field(default_factory=set)
    #: inside an ``except ...NotFound:`` handler of a lookup: ``row = None`` there keeps the
    #: row's name, as "the row or None"
    missing: int = 0


def none_on_miss(fa: "FunctionAnalyzer", name: str) -> bool:
    """``row = None`` where ``row`` holds a lookup's row: True when the name still means "the
    row, or None" (the lookup may miss, or this is its miss handler), marking it so."""
    ent = fa.entities[name]
    if fa.helper_checks.missing and not ent.maybe_none:
        ent.maybe_none = True
    return ent.maybe_none


# -- the helper's side: its summary

def note_return(fa: "FunctionAnalyzer", value: cst.BaseExpression) -> bool:
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


def _exists_answer(fa: "FunctionAnalyzer", value: cst.BaseExpression) -> Optional[tuple]:
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


def note_assigned(fa: "FunctionAnalyzer", targets, value: cst.BaseExpression, got: tuple) -> bool:
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


def call_check(fa: "FunctionAnalyzer", test: cst.BaseExpression) -> Optional[tuple]:
    """``if not has_vote(user, poll):``: (kind, what, models) for a test that calls a
    helper answering a lookup."""
    for call in iter_calls(test):
        got = fa.from_helper(call)
        if got is not None and isinstance(got[0], Presence):
            p, helper, filename = got
            return (p.kind.value, f"a row looked up by {_what(helper, p, filename)}", p.models)
    return None


def found_test(fa: "FunctionAnalyzer", node: cst.CSTNode) -> bool:
    """Whether ``node`` (a test's operand) is true when the helper found the row: the
    ``if`` body is then the branch where the row exists."""
    if isinstance(node, cst.Name):
        return node.value in fa.helper_checks.names
    if isinstance(node, cst.Call):
        got = fa.from_helper(node)
        return got is not None and isinstance(got[0], Presence)
    return False


# -- the get-or-create contract

#: a function named for the contract: ``get_or_create_project``, ``find_or_create_kek``
_GET_OR_CREATE = re.compile(r"(?:get|find|fetch|load|lookup)\w*_or_(?:create|add|insert|make|new)")


def note_settled(fa: "FunctionAnalyzer", check: Check, act: "Act", node: cst.CSTNode) -> None:
    """An insert a unique key settles: kept for :func:`finish`, which reports it when the
    function hands the row on as the one it found or made.

    Only a function named for the contract (``get_or_create_*``, ``find_or_create_*``) makes
    the promise: on the judged corpus, plain getters that insert a missing row under a unique
    key (``get_tag(name)``) were judged safe, the caller taking the error as any other."""
    if check.kind is CheckKind.NONE and not fa.integrity_depth and not check.locked and \
            fa.outer is None and _GET_OR_CREATE.search(fa.name.lower()):
        fa.helper_checks.settled.append((check, act, node))


def finish(fa: "FunctionAnalyzer") -> None:
    """When the walk has ended: drop a derived answer that never returns None (it answers
    nothing), and report the get-or-create inserts that return the row."""
    if isinstance(fa.returned, Presence) and fa.returned.derived and not _may_return_none(fa.node):
        fa.returned = None
    if not fa.helper_checks.settled:
        return
    returns = _returned_names(fa)
    for check, act, node in fa.helper_checks.settled:
        row = (check.keys or set()) & (act.names | _bound_to(fa.node, node))
        if not any(line > act.line and names & row for line, names in returns):
            continue
        fw = fa.framework_hint()
        fa.report(node, "TXN105", get_or_create_message(check, act, fw), confidence=Confidence.MEDIUM)
    fa.helper_checks.settled = []


def _returned_names(fa: "FunctionAnalyzer") -> list[tuple[int, set]]:
    out = []
    stack = list(fa.node.body.body) if hasattr(fa.node.body, "body") else []
    while stack:
        n = stack.pop()
        if isinstance(n, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        if isinstance(n, cst.Return) and n.value is not None:
            out.append((fa.line(n), names_in(n.value)))
        stack.extend(kids(n))
    return out


def _bound_to(fn: cst.FunctionDef, node: cst.CSTNode) -> set:
    """Names an assignment binds to the value of ``node`` (``x = M.objects.create(..)``)."""
    for n in walk_nodes(fn):
        if isinstance(n, cst.Assign) and any(c is node for c in iter_calls(n.value)):
            return set().union(*(names_in(t.target) for t in n.targets))
    return set()


def get_or_create_message(check: Check, act: "Act", framework: Optional[str]) -> str:
    fix = "use get_or_create(), which does this" if framework == "django" else \
        "or INSERT ... ON CONFLICT DO NOTHING and read the row"
    return (f"TXN105 check-then-act: {check.what} checked at line {check.line}, then {act.what} at "
            f"line {act.line}, and the row found or made is returned: a unique key stops the "
            f"duplicate, but a racing call's insert fails with IntegrityError instead of returning "
            f"the row; catch IntegrityError around the insert and read the row again, {fix}")
