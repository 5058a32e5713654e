"""Which columns a query selects its rows by *state*: the facts a claim needs.

A worker that claims rows reads them because of what a column holds (``status="new"``,
``lock__lt=deadline``, ``Trigger.triggerer_id.is_(None)``), then writes that same column
(``task.lock = now; task.save()``).  Two workers that read before either writes both
claim the row: the compare and the set are two statements.  This module finds the first
half, the columns compared with a constant or a range, so the walk can record it on the
entity; ``rules/claim.py`` judges the pair.

A column compared for equality with a *variable* (``email=email``, ``pk=pk``) identifies
the row rather than selecting it by state, and is left out: changing a row's own key is
not a claim.  A join's column (``user__plan__state``) keeps its path: it is no column of the
queried row, but the state a related row was selected by (``conditions.joined``).
"""
from __future__ import annotations

import dataclasses

import re
from typing import Iterator, Optional

import libcst as cst

from .syntax import chain, dotted, terminal

#: calls whose arguments are conditions on the queried rows
_CONDITION_CALLS = frozenset({"filter", "filter_by", "where", "exclude", "get", "get_or_none",
                              "get_object_or_404", "get_or_404", "first_or_404", "one_or_404"})
#: Django lookups that select by a value's range rather than naming one row
_RANGE_LOOKUPS = frozenset({"lt", "lte", "gt", "gte", "isnull", "in", "range", "exact", "iexact"})
#: SQLAlchemy column methods that are conditions of that kind
_RANGE_METHODS = frozenset({"is_", "isnot", "is_not", "in_", "not_in", "notin_", "between"})
#: primary keys identify rows; a condition on them is never a state
_KEYS = frozenset({"pk", "id"})
_CONSTANT_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


def state_columns(call: cst.BaseExpression) -> frozenset[str]:
    """The queried model's own columns that ``call``'s conditions compare with a constant or
    a range: ``{"lock"}`` for ``M.objects.filter(key=k, lock__lt=t)``, ``{"status"}`` for
    ``select(M).where(M.status == "new")``; slices and further calls of the chain included."""
    found: set[str] = set()
    _, calls, _ = chain(call)
    for c in calls:
        if terminal(c) not in _CONDITION_CALLS:
            continue
        args = list(c.args)
        if terminal(c) == "get_object_or_404" and args and args[0].keyword is None:
            args = args[1:]
        for arg in args:
            found.update(_from_argument(arg))
    return frozenset(found - _KEYS)


def _from_argument(arg: cst.Arg) -> Iterator[str]:
    if arg.star:
        return
    if arg.keyword is not None:
        yield from _from_keyword(arg.keyword.value, arg.value)
    else:
        yield from _from_condition(arg.value)


def _from_keyword(name: str, value: cst.BaseExpression) -> Iterator[str]:
    """``lock__lt=t`` -> ``lock``; a join's column keeps its path (``plan__recurring__last_at``):
    no column of the queried row, the state of a related one (``conditions.joined``)."""
    parts = name.split("__")
    if parts[-1] in _RANGE_LOOKUPS and len(parts) > 1:
        if parts[-1] not in ("exact", "iexact") or is_constant(value):
            yield "__".join(parts[:-1])
    elif is_constant(value):
        yield name


def _from_condition(expr: cst.BaseExpression) -> Iterator[str]:
    """Positional conditions: ``Q(...)`` (and ``~Q``, ``Q | Q``), SQLAlchemy comparisons,
    ``and_()`` / ``or_()`` and column methods (``M.a.is_(None)``)."""
    if isinstance(expr, cst.UnaryOperation):
        yield from _from_condition(expr.expression)
    elif isinstance(expr, cst.BinaryOperation):        # Q(..) | Q(..), Q(..) & Q(..)
        yield from _from_condition(expr.left)
        yield from _from_condition(expr.right)
    elif isinstance(expr, cst.BooleanOperation):
        yield from _from_condition(expr.left)
        yield from _from_condition(expr.right)
    elif isinstance(expr, cst.Comparison) and len(expr.comparisons) == 1:
        yield from _from_comparison(expr)
    elif isinstance(expr, cst.Call):
        name = dotted(expr.func)
        last = name.rsplit(".", 1)[-1]
        if last == "Q" or last in ("and_", "or_", "not_"):
            for arg in expr.args:
                yield from _from_argument(arg)
        elif last in _RANGE_METHODS and isinstance(expr.func, cst.Attribute) and \
                isinstance(expr.func.value, cst.Attribute):
            yield expr.func.value.attr.value


def states_of(expr: cst.BaseExpression) -> Optional[frozenset[str]]:
    """The columns a condition built apart from its query compares (``Q(a__isnull=True) |
    Q(a__lt=t)``, ``and_(..)``); None when ``expr`` is no such condition."""
    node = expr
    while isinstance(node, (cst.UnaryOperation, cst.BinaryOperation)):
        node = node.expression if isinstance(node, cst.UnaryOperation) else node.left
    if not isinstance(node, cst.Call) or dotted(node.func).rsplit(".", 1)[-1] not in ("Q", "and_", "or_"):
        return None
    return frozenset(_from_condition(expr)) - _KEYS


def _from_comparison(expr: cst.Comparison) -> Iterator[str]:
    op = expr.comparisons[0].operator
    right = expr.comparisons[0].comparator
    left = expr.left
    if not isinstance(left, cst.Attribute):
        return
    if isinstance(op, (cst.Equal, cst.NotEqual, cst.Is, cst.IsNot)):
        if is_constant(right):
            yield left.attr.value
    elif isinstance(op, (cst.LessThan, cst.LessThanEqual, cst.GreaterThan, cst.GreaterThanEqual)):
        yield left.attr.value


def is_constant(expr: cst.BaseExpression) -> bool:
    """A literal (``"new"``, ``False``, ``None``, ``3``) or a named constant
    (``Status.NEW``, ``Order.STATUS_PAID``, ``PENDING``)."""
    if isinstance(expr, (cst.SimpleString, cst.Integer, cst.Float, cst.ConcatenatedString)):
        return True
    if isinstance(expr, cst.Name):
        return expr.value in ("True", "False", "None") or bool(_CONSTANT_NAME.match(expr.value))
    if isinstance(expr, cst.Attribute):
        return bool(_CONSTANT_NAME.match(expr.attr.value))
    if isinstance(expr, cst.UnaryOperation):
        return is_constant(expr.expression)
    return False


def is_slice(expr: cst.BaseExpression) -> bool:
    """``qs[0:10]``: a sliced queryset is still a queryset (an index, ``qs[0]``, is a row)."""
    return isinstance(expr, cst.Subscript) and len(expr.slice) == 1 and \
        isinstance(expr.slice[0].slice, cst.Slice)


def set_values(call: cst.Call) -> dict[str, cst.BaseExpression]:
    """The columns an update sets, with the expression each is set to: ``update(lock=t)``
    (Django), ``update({M.owner: me})`` or ``update(M).where(..).values(owner=me)``
    (SQLAlchemy)."""
    found: dict[str, cst.BaseExpression] = {}
    _, calls, _ = chain(call)
    for c in calls:
        if terminal(c) not in ("update", "values"):
            continue
        for arg in c.args:
            if arg.keyword is not None:
                found[arg.keyword.value] = arg.value
            elif isinstance(arg.value, cst.Dict):
                for el in arg.value.elements:
                    key = getattr(el, "key", None)
                    if isinstance(key, cst.Attribute):
                        found[key.attr.value] = el.value
                    elif isinstance(key, cst.SimpleString):
                        found[key.value.strip("'\"")] = el.value
    return found


def condition_names(call: cst.Call) -> set[str]:
    """The plain names the conditions of ``call``'s chain read (``filter(id__in=ids)``)."""
    names: set[str] = set()
    _, calls, _ = chain(call)
    for c in calls:
        if terminal(c) in _CONDITION_CALLS:
            for arg in c.args:
                names.update(n.value for n in _names(arg.value))
    return names


def _names(node: cst.CSTNode) -> Iterator[cst.Name]:
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, cst.Name):
            yield n
        elif isinstance(n, cst.Attribute):
            stack.append(n.value)           # ``t.id``: the name ``t``, not ``id``
        else:
            stack.extend(c for c in n.children if isinstance(c, cst.CSTNode))


def related_model(names: list[str]) -> Optional[str]:
    """``unit.check_set.filter(...)``: the rows of Django's reverse relation manager
    ``<model>_set``, model ``Check`` (the default related name, named after the model)."""
    for name in names[1:]:
        if name.endswith("_set") and len(name) > 4:
            return "".join(part.capitalize() for part in name[:-4].split("_"))
    return None


#: what a request carries that is not a row an earlier step read
_REQUEST_PLAIN = frozenset({"user", "POST", "GET", "data", "session", "META", "FILES", "COOKIES",
                            "headers", "query_params", "method", "path", "body", "content_type",
                            "resolver_match", "auth", "accepted_renderer", "version", "scheme",
                            "LANGUAGE_CODE", "htmx", "site", "urlconf", "encoding"})


def request_row(value: cst.BaseExpression) -> "Optional[str]":
    """``getattr(request, "access_code", None)`` or ``request.event``: a row a middleware
    or an earlier step of the view read and kept on the request (its name), or None."""
    if isinstance(value, cst.Call) and dotted(value.func) == "getattr" and len(value.args) >= 2 and \
            isinstance(value.args[1].value, cst.SimpleString):
        holder, attr = value.args[0].value, value.args[1].value.value.strip("'\"")
    elif isinstance(value, cst.Attribute):
        holder, attr = value.value, value.attr.value
    else:
        return None
    if dotted(holder) not in ("request", "self.request") or attr in _REQUEST_PLAIN or attr.startswith("_"):
        return None
    return f"{dotted(holder)}.{attr}"


@dataclasses.dataclass(frozen=True)
class Selection:
    """Rows (or their ids) a query picked by state, kept in a variable: ``ids = [t.id for t in
    session.query(T.id).filter(T.owner.is_(None))]`` (``rules/claim.py`` judges an update of them)."""

    name: str
    line: int
    columns: frozenset
    for_update: bool
