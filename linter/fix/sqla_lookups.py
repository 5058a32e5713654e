"""The SQLAlchemy lookups an exists-then-create checks with, recognised exactly: the session
it runs on, the mapped class it reads and the ``column == value`` pairs it looks up.

``session.query(M).filter_by(k=v).first()`` (``filter(M.k == v)``, ``one_or_none()``),
``M.query.filter_by(k=v).first()`` (Flask-SQLAlchemy), ``session.scalars(select(M).where(M.k
== v)).first()``, ``session.execute(select(M).where(...)).scalar_one_or_none()`` (and
``.scalars().first()``), ``session.scalar(select(M).where(...))``, and a count of them,
``session.scalar(select(func.count()).select_from(M).where(...))``.  Anything else in the
chain (an ``order_by()``, a join, an operator other than ``==``) is no lookup."""
from __future__ import annotations

import dataclasses
from typing import Optional

import libcst as cst


@dataclasses.dataclass(frozen=True)
class Lookup:
    """A lookup of ``model`` by ``keys`` (column name -> the value's code) on ``session``
    (its code; None for Flask-SQLAlchemy's ``Model.query``); ``count``: it counts the rows."""

    session: Optional[str]
    model: str
    keys: tuple[tuple[str, str], ...]
    count: bool = False


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def _method(node: cst.BaseExpression) -> Optional[tuple[str, cst.BaseExpression, list[cst.Arg]]]:
    """(name, receiver, args) of ``receiver.name(args)``."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        return node.func.attr.value, node.func.value, list(node.args)
    return None


def _keys_of(model: str, method: str, args: list[cst.Arg]) -> Optional[list[tuple[str, str]]]:
    """The pairs of ``filter_by(k=v)`` or ``filter(M.k == v)`` / ``where(M.k == v)``."""
    out = []
    for arg in args:
        if arg.star:
            return None
        if method == "filter_by":
            if arg.keyword is None:
                return None
            out.append((arg.keyword.value, _code(arg.value)))
            continue
        test = arg.value
        if arg.keyword is not None or not isinstance(test, cst.Comparison) or len(test.comparisons) != 1 \
                or not isinstance(test.comparisons[0].operator, cst.Equal):
            return None
        left = test.left
        if not isinstance(left, cst.Attribute) or not isinstance(left.value, cst.Name) \
                or left.value.value != model:
            return None
        out.append((left.attr.value, _code(test.comparisons[0].comparator)))
    return out


def _filtered(node: cst.BaseExpression) -> Optional[tuple[cst.BaseExpression, list[tuple[str, list[cst.Arg]]]]]:
    """The statement or query under ``.filter_by()`` / ``.filter()`` / ``.where()`` calls, and
    those calls (innermost first)."""
    filters: list[tuple[str, list[cst.Arg]]] = []
    while True:
        m = _method(node)
        if m is None or m[0] not in ("filter_by", "filter", "where"):
            break
        filters.append((m[0], m[2]))
        node = m[1]
    filters.reverse()
    return node, filters


def _select_of(node: cst.BaseExpression) -> Optional[tuple[str, bool, list]]:
    """(model, count, filters) of ``select(M).where(...)`` or
    ``select(func.count()).select_from(M).where(...)``."""
    base, filters = _filtered(node)
    count = False
    m = _method(base)
    if m is not None and m[0] == "select_from" and len(m[2]) == 1 and isinstance(m[2][0].value, cst.Name):
        model, base = m[2][0].value.value, m[1]
        count = True
    if not isinstance(base, cst.Call) or not isinstance(base.func, cst.Name) or base.func.value != "select" \
            or len(base.args) != 1 or base.args[0].keyword or base.args[0].star:
        return None
    what = base.args[0].value
    if count:
        if not (isinstance(what, cst.Call) and _code(what.func) in ("func.count", "count") and not what.args):
            return None
    elif isinstance(what, cst.Name):
        model = what.value
    else:
        return None
    return model, count, filters


def _query_of(node: cst.BaseExpression) -> Optional[tuple[Optional[str], str, list]]:
    """(session, model, filters) of ``session.query(M).filter...`` / ``M.query.filter...``."""
    base, filters = _filtered(node)
    if isinstance(base, cst.Attribute) and base.attr.value == "query" and isinstance(base.value, cst.Name):
        return None, base.value.value, filters
    m = _method(base)
    if m is None or m[0] != "query" or len(m[2]) != 1 or not isinstance(m[2][0].value, cst.Name) \
            or m[2][0].keyword:
        return None
    return _code(m[1]), m[2][0].value.value, filters


def _finish(session: Optional[str], model: str, filters: list, count: bool = False) -> Optional[Lookup]:
    keys: list[tuple[str, str]] = []
    for method, args in filters:
        got = _keys_of(model, method, args)
        if got is None:
            return None
        keys.extend(got)
    names = [k for k, _v in keys]
    if not keys or len(set(names)) != len(names):
        return None
    return Lookup(session, model, tuple(keys), count)


def lookup(expr: cst.BaseExpression) -> Optional[Lookup]:
    """The lookup ``expr`` is, or None."""
    m = _method(expr)
    if m is None:
        return None
    name, inner, args = m
    if name in ("first", "one_or_none") and not args:
        query = _query_of(inner)
        if query is not None:
            return _finish(*query)
        call = _method(inner)
        if call is not None and call[0] == "scalars" and not call[2]:    # execute(...).scalars()
            call = _method(call[1])
            if call is None or call[0] != "execute":
                return None
        if call is not None and call[0] in ("scalars", "execute") and len(call[2]) == 1:
            picked = _select_of(call[2][0].value)
            if picked is not None and not picked[1]:
                return _finish(_code(call[1]), picked[0], picked[2])
        return None
    if name == "scalar_one_or_none" and not args:
        execute = _method(inner)
        if execute is not None and execute[0] == "execute" and len(execute[2]) == 1:
            picked = _select_of(execute[2][0].value)
            if picked is not None and not picked[1]:
                return _finish(_code(execute[1]), picked[0], picked[2])
        return None
    if name == "scalar" and len(args) == 1 and not args[0].keyword:
        picked = _select_of(args[0].value)
        if picked is not None:
            return _finish(_code(inner), picked[0], picked[2], picked[1])
    return None
