"""Rows a helper hands out to be iterated: generators that yield rows, functions that return
a queryset, and the loops and comprehensions of their callers.

A queue runner's ``for message in prioritize(): ...; message.defer()`` and a verifier's
``(d for d in devices_for_user(user) if d.verify_token(token))`` read their rows in another
function: the helper runs the query (``for m in qs: yield m``, ``yield qs[0]``,
``yield from qs``, ``return M.objects.filter(..)``) and the caller changes and saves each
row.  The helper's summary (:attr:`FunctionAnalyzer.yielded`, a ``Returned``) says which
read the rows came from and under which transactions and locks, as ``Returned`` does for a
helper that returns one row; the caller's loop variable then is an entity of that read, so
its writes, and the model methods called on it, are judged as if the loop ran the query.

A helper that locks the rows on some path (``if for_verify: qs = qs.select_for_update()``)
hands out locked rows: the caller that asked for them holds the lock, so nothing is
reported for it.
"""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Iterator, Optional

import libcst as cst

from ..facts.module_facts import GetInfo
from ..facts.query_selection import is_slice, related_model, state_columns
from ..facts.syntax import chain, is_model_name, kids, terminal

if TYPE_CHECKING:
    from .state import FunctionState

#: terminals that evaluate a queryset to something other than rows
_NOT_ROWS = frozenset({"count", "exists", "create", "update", "delete", "aggregate", "values_list",
                       "values", "get_or_create", "update_or_create", "bulk_create", "in_bulk"})


def rows_info(fa: "FunctionState", expr: cst.BaseExpression) -> Optional[GetInfo]:
    """The read behind ``expr`` when it is many rows not yet evaluated: a queryset kept in a
    variable, a manager chain (``M.objects.filter(..)``, ``qs.order_by(..)``), a SQLAlchemy
    list of rows."""
    if isinstance(expr, cst.Name):
        return fa.querysets.get(expr.value)
    if not isinstance(expr, (cst.Call, cst.Attribute)) and not is_slice(expr):
        return None
    if isinstance(expr, cst.Call) and terminal(expr) in _NOT_ROWS:
        return None
    names, calls, root = chain(expr)
    base = fa.querysets.get(root.value) if isinstance(root, cst.Name) else None
    related = related_model(names) if "django" in fa.mod.info.frameworks else None
    if fa.manager_chain(names) or related or (base is not None and len(names) >= 2):
        fu = any(terminal(c) == "select_for_update" for c in calls) or bool(base and base.for_update)
        model = base.model if base is not None else related or (
            root.value if isinstance(root, cst.Name) and is_model_name(root.value) else None)
        info = GetInfo(model, model, None, "django", for_update=fu)
        info.state = state_columns(expr) | (base.state if base is not None else frozenset())
        return info
    return fa.sqla_rows(expr)


def _row_info(fa: "FunctionState", expr: cst.BaseExpression) -> Optional[GetInfo]:
    """The read behind one row ``expr``: an entity's, a get's, or an index into rows (``qs[0]``)."""
    if isinstance(expr, cst.Name) and expr.value in fa.entities:
        ent = fa.entities[expr.value]
        if ent.source not in ("get", "call", "loop"):
            return None
        return GetInfo(ent.model, ent.getter, ent.key, ent.framework, for_update=ent.for_update,
                       locked=ent.locked_read)
    if isinstance(expr, cst.Call):
        return fa.classify_get(expr)
    if isinstance(expr, cst.Subscript) and not is_slice(expr):
        return rows_info(fa, expr.value)
    return None


def note_out(fa: "FunctionState", small: cst.CSTNode) -> None:
    """Remember the first rows this function yields (``yield row``, ``yield from qs``) or
    returns unevaluated (``return M.objects.filter(..)``): what its callers iterate."""
    if fa.outer is not None or fa.yielded is not None:
        return
    info = None
    if isinstance(small, cst.Return) and small.value is not None:
        info = rows_info(fa, small.value)
    elif isinstance(small, cst.Expr) and isinstance(small.value, cst.Yield) and small.value.value is not None:
        out = small.value.value
        info = rows_info(fa, out.item) if isinstance(out, cst.From) else _row_info(fa, out)
    if info is None:
        return
    from .records import Returned
    line = fa.line(small)
    fa.yielded = Returned(info, tuple(fa.stack), line,
                          bool(info.model and info.model in fa.mod.info.versioned),
                          fa.mod.policy_of(info.model))


def iterated_helper(fa: "FunctionState", expr: cst.BaseExpression) -> Optional[tuple]:
    """(Returned, helper name, file) when ``expr`` calls a helper whose rows are iterated
    (``prioritize()``, ``self.pending_rows()``, ``repo.find_due_jobs()``)."""
    if not isinstance(expr, cst.Call):
        return None
    mod = fa.mod
    func = expr.func
    if isinstance(func, cst.Name):
        return mod.returned_by(func.value, None, attr="yielded")
    if not isinstance(func, cst.Attribute):
        return None
    name = func.attr.value
    if isinstance(func.value, cst.Name):
        alias = func.value.value
        if alias in ("self", "cls"):
            return mod.returned_by_method(fa.qualname.split(".", 1)[0], name, attr="yielded") or \
                mod.returned_by_name(name, attr="yielded")
        if alias in mod.info.imports or alias in mod.module_aliases:
            return mod.returned_by(name, alias, attr="yielded")
    return mod.returned_by_name(name, attr="yielded")


#: decorators that make a method read like an attribute (``self.invitation``)
_PROPERTIES = frozenset({"property", "cached_property", "cached_property_with_ttl"})


def property_row(fa: "FunctionState", expr: cst.BaseExpression) -> Optional[tuple]:
    """(Returned, ``self.name``, file) for ``self.name`` when ``name`` is a property (or
    ``cached_property``) of this class that returns a row it read: a view's
    ``self.invitation`` loaded on first use."""
    if not (isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name)
            and expr.value.value == "self" and fa.is_method):
        return None
    cls = fa.qualname.split(".", 1)[0]
    key = (cls, expr.attr.value)
    item = fa.mod.loader_method(*key)
    if item is None or not any(_decorator_name(d) in _PROPERTIES for d in item[0].decorator_list):
        return None
    return fa.mod.returned_by_method(cls, expr.attr.value)


def _decorator_name(node) -> str:
    """The last name of an ``ast`` decorator (``functools.cached_property`` -> cached_property)."""
    while hasattr(node, "func"):
        node = node.func
    return getattr(node, "attr", None) or getattr(node, "id", "")


def bind_iterated(fa: "FunctionState", it: cst.BaseExpression, target: str, line: int) -> bool:
    """``for row in helper()``: ``row`` is an entity of the helper's read."""
    got = iterated_helper(fa, it)
    if got is None:
        return False
    ent = fa.new_returned_entity(target, got, line)
    ent.state = getattr(got[0].info, "state", frozenset())
    return True


@contextlib.contextmanager
def comprehension_rows(fa: "FunctionState", node: cst.CSTNode) -> Iterator[None]:
    """While the calls of ``node`` are walked, the targets of its comprehensions over rows
    (``(d for d in devices(user) if d.verify(t))``) are entities; afterwards the names are
    what they were (a comprehension's variable does not leak)."""
    saved: dict = {}
    for comp in _comprehensions(node):
        target = comp.target
        if not isinstance(target, cst.Name):
            continue
        name = target.value
        if name not in saved:
            saved[name] = fa.entities.get(name)
        line = fa.line(comp)
        info = rows_info(fa, comp.iter)
        if info is not None:
            fa.new_entity(name, info, line, source="loop")
        elif not bind_iterated(fa, comp.iter, name, line):
            fa.entities.pop(name, None)     # not a row here, whatever the name held outside
    try:
        yield
    finally:
        for name, old in saved.items():
            if old is None:
                fa.entities.pop(name, None)
            else:
                fa.entities[name] = old


def _comprehensions(node: cst.CSTNode) -> list[cst.CompFor]:
    """The comprehensions ``node`` evaluates, outermost first (not inside lambdas or nested
    definitions); a walk without whitespace nodes, as ``iter_calls`` does (this runs for
    every expression the walk visits)."""
    found: list[cst.CompFor] = []
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, (cst.Lambda, cst.FunctionDef, cst.ClassDef)):
            continue
        if isinstance(n, cst.CompFor):
            found.append(n)
        stack.extend(reversed(kids(n)))
    return found
