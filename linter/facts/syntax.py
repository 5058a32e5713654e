"""How the source spells reads, writes and checks: libcst helpers and the ORM vocabulary.

Pure functions over syntax (dotted names, call chains, the names an expression reads, the
columns an insert sets) and the tables of ORM method names they are matched against. They
judge nothing: the walk (``flow/walk.py``) decides what a call means.
"""
from __future__ import annotations

import dataclasses
import io
import re
from typing import Iterator, Optional

import libcst as cst


_EMPTY_MODULE = cst.Module(body=[])


def source_lines(source: str, keepends: bool = False) -> list[str]:
    """The lines of ``source`` as Python numbers them: only ``\n``, ``\r\n`` and ``\r`` end
    a line (``str.splitlines`` also splits at a form feed, ``\v``, ``\x1c``..., which the
    tokenizer takes for whitespace, and every line number after one would be off)."""
    lines = io.StringIO(source, newline="").readlines()
    return lines if keepends else [line.rstrip("\r\n") for line in lines]


def code_of(node: cst.CSTNode) -> str:
    return _EMPTY_MODULE.code_for_node(node)


def label(node: cst.CSTNode) -> str:
    """Source text of a call's callee, shortened for messages."""
    text = " ".join(code_of(node).split())
    if len(text) <= 60:
        return text
    return dotted(node) if isinstance(node, cst.BaseExpression) and dotted(node) else text[:57] + "..."


def dotted(expr: cst.BaseExpression) -> str:
    """``a.b.c`` for a plain attribute chain; calls in the chain are skipped over."""
    parts: list[str] = []
    while True:
        if isinstance(expr, cst.Name):
            parts.append(expr.value)
            break
        if isinstance(expr, cst.Attribute):
            parts.append(expr.attr.value)
            expr = expr.value
        elif isinstance(expr, cst.Call):
            expr = expr.func
        elif isinstance(expr, cst.Subscript):
            expr = expr.value
        else:
            break
    return ".".join(reversed(parts))


def chain(expr: cst.BaseExpression) -> tuple[list[str], list[cst.Call], cst.BaseExpression]:
    """Names of the attribute/call chain (outermost last), its calls and its root.

    An awaited link is the value it gives (``(await session.execute(q)).scalar_one()`` is
    the chain ``session.execute(q).scalar_one()``): asyncio's sessions and results answer
    the same calls as the sync ones, awaited."""
    names: list[str] = []
    calls: list[cst.Call] = []
    while True:
        if isinstance(expr, cst.Call):
            calls.append(expr)
            expr = expr.func
        elif isinstance(expr, cst.Attribute):
            names.append(expr.attr.value)
            expr = expr.value
        elif isinstance(expr, cst.Subscript):
            expr = expr.value
        elif isinstance(expr, cst.Await) and (names or calls):
            expr = expr.expression
        else:
            if isinstance(expr, cst.Name):
                names.append(expr.value)
            break
    names.reverse()
    return names, calls, expr


def receiver_prefix(call: cst.Call) -> Optional[cst.BaseExpression]:
    """The object a call chain starts from: ``own`` in ``own.get(M, 1)`` and in
    ``own.execute(q).scalar_one()``, ``self.db`` in ``self.db.get(M, 1)``; None when the
    chain does not start at a plain name or attribute."""
    node = call.func.value if isinstance(call.func, cst.Attribute) else None
    while node is not None:
        inner = node
        while isinstance(inner, cst.Attribute):
            inner = inner.value
        if isinstance(inner, cst.Call) and isinstance(inner.func, cst.Attribute):
            node = inner.func.value
            continue
        return node if isinstance(inner, cst.Name) else None
    return None


#: Django's async ORM (4.1+) names each query method with an ``a``; the analysis judges
#: ``await M.objects.aget(...)`` / ``await x.asave()`` as their sync twins
_ASYNC_TWINS = {f"a{name}": name for name in (
    "get", "first", "last", "latest", "earliest", "get_or_create", "update_or_create", "in_bulk",
    "save", "create", "bulk_create", "bulk_update", "update", "delete", "exists", "count",
    "aggregate", "refresh_from_db", "contains")}


def terminal(call: cst.Call) -> str:
    f = call.func
    if isinstance(f, cst.Name):
        return f.value
    if isinstance(f, cst.Attribute):
        name = f.attr.value
        return _ASYNC_TWINS.get(name, name)
    return ""


def is_model_name(name: str) -> bool:
    """A class's name by the convention models follow: CamelCase, not a CONSTANT.  A module's
    private model (``class _CustomData(ModelBase)``, used only through a wrapper) is one too:
    the leading underscores say who may import it, not what it is."""
    name = name.lstrip("_")
    return bool(name) and name[0].isupper() and not name.isupper()


def first_arg_name(call: cst.Call) -> Optional[str]:
    if call.args and call.args[0].keyword is None:
        v = call.args[0].value
        if isinstance(v, cst.Name):
            return v.value
        if isinstance(v, cst.Attribute):
            return v.attr.value
        if isinstance(v, cst.SimpleString):
            s = v.value.strip("'\"")
            return s if is_model_name(s) else None
    return None


def maybe_models(model: Optional[str]) -> frozenset:
    return frozenset({model}) if model else frozenset()


def models_in(expr: cst.CSTNode) -> frozenset:
    out = set()
    stack = [expr]
    while stack:
        n = stack.pop()
        if isinstance(n, cst.Name) and is_model_name(n.value) and \
                n.value not in ("None", "True", "False"):
            out.add(n.value)
        elif isinstance(n, cst.Attribute):
            stack.append(n.value)
            continue
        stack.extend(kids(n))
    return frozenset(out)


_STRING_NODES = (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)
_SEQUENCE_NODES = (cst.List, cst.Tuple, cst.ListComp)


def non_numeric(expr: cst.BaseExpression) -> bool:
    """Is ``expr`` obviously a string or a sequence (so ``x.f += expr`` is no counter)?

    Only what the source shows: literals, f-strings, ``"..." % v``, ``"...".format()`` /
    ``"...".join()``, ``str(...)``, and ``+`` with such an operand."""
    stack = [expr]
    while stack:
        expr = stack.pop()
        if isinstance(expr, cst.BinaryOperation):
            if isinstance(expr.operator, cst.Add):
                stack += (expr.right, expr.left)
            elif isinstance(expr.operator, cst.Modulo):
                stack.append(expr.left)
        elif isinstance(expr, _STRING_NODES) or isinstance(expr, _SEQUENCE_NODES):
            return True
        elif isinstance(expr, cst.Call):
            f = expr.func
            if isinstance(f, cst.Name) and f.value == "str" or \
                    isinstance(f, cst.Attribute) and f.attr.value in ("format", "join") and \
                    isinstance(f.value, _STRING_NODES):
                return True
    return False


def kwarg(call: cst.Call, name: str) -> Optional[cst.BaseExpression]:
    for a in call.args:
        if a.keyword is not None and a.keyword.value == name:
            return a.value
    return None


def names_in(node: cst.CSTNode) -> set[str]:
    out: set[str] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, cst.Name):
            out.add(n.value)
        elif isinstance(n, cst.Lambda):
            continue
        if isinstance(n, cst.Attribute):
            stack.append(n.value)      # attribute names are not variables
            continue
        stack.extend(kids(n))
    return out


_SKIP_FIELDS = ("whitespace", "lpar", "rpar", "semicolon", "comma", "leading_lines", "header",
                "footer", "lines_after", "newline", "trailing_whitespace", "equal", "colon", "dot",
                "star", "default_indent", "default_newline", "encoding", "indent")
_FIELDS: dict[type, tuple[str, ...]] = {}


#: names every statement of a handler may mention: sharing them links no check to an insert
CONTEXT_NAMES = frozenset({"self", "cls", "request", "user", "session", "db"})


def exits(block: cst.BaseSuite) -> bool:
    """Whether a block always leaves (its last statement raises, returns, continues or breaks)."""
    body = getattr(block, "body", ())
    if not body:
        return False
    last = body[-1]
    if isinstance(last, cst.SimpleStatementLine):
        return any(isinstance(s, (cst.Raise, cst.Return, cst.Continue, cst.Break)) for s in last.body)
    return False


def inserted_call(node: cst.CSTNode) -> Optional[cst.Call]:
    """The call whose keyword arguments are an inline insert's columns: ``M.objects.create(...)``
    itself, ``M(...)`` of ``session.add(M(...))`` or of ``M(...).save()``; None otherwise."""
    if not isinstance(node, cst.Call):
        return None
    term = terminal(node)
    if term == "create" and isinstance(node.func, cst.Attribute) and isinstance(node.func.value, cst.Call) and \
            is_model_name(dotted(node.func.value.func).rsplit(".", 1)[-1]):
        return node.func.value      # an object layer's ``Trait(ctx, name=n).create()``
    if term not in ("add", "save", "put"):
        return node
    inner = node.args[0].value if term == "add" and node.args else \
        (node.func.value if term != "add" and isinstance(node.func, cst.Attribute) else None)
    return inner if isinstance(inner, cst.Call) else None


def insert_keys(node: cst.CSTNode) -> Optional[frozenset[str]]:
    """The columns an insert sets, as keyword arguments of ``M.objects.create(...)``,
    ``session.add(M(...))`` or ``M(...).save()``; None when they are not all visible."""
    call = inserted_call(node)
    if call is None:
        return None
    keys = set()
    for arg in call.args:
        if arg.keyword is None:
            return None            # positional or **kwargs: not known
        keys.add(arg.keyword.value)
    return frozenset(keys)


def columns_reading(node: cst.CSTNode, names: set) -> frozenset[str]:
    """The columns an insert (as :func:`insert_keys` reads it) sets from a value that reads one
    of ``names``: ``number`` of ``Invoice.objects.create(number=last + 1, ...)`` for ``{"last"}``."""
    call = inserted_call(node)
    if call is None:
        return frozenset()
    return frozenset(arg.keyword.value for arg in call.args
                     if arg.keyword is not None and names & set(names_in(arg.value)))


def walk_nodes(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(kids(n))


def kids(node: cst.CSTNode) -> list:
    """Child nodes without whitespace tokens (much cheaper than ``node.children``)."""
    t = type(node)
    names = _FIELDS.get(t)
    if names is None:
        names = _FIELDS[t] = tuple(f.name for f in dataclasses.fields(t)
                                   if not f.name.startswith(_SKIP_FIELDS))
    out = []
    for name in names:
        v = getattr(node, name)
        if isinstance(v, cst.CSTNode):
            out.append(v)
        elif type(v) in (list, tuple):
            out.extend(x for x in v if isinstance(x, cst.CSTNode))
    return out


def iter_calls(node: cst.CSTNode) -> Iterator[cst.Call]:
    """Calls evaluated by ``node`` (not those inside lambdas or nested defs)."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, (cst.Lambda, cst.FunctionDef, cst.ClassDef)):
            continue
        if isinstance(n, cst.Call):
            yield n
        stack.extend(reversed(kids(n)))


DJANGO_GET_TERMINALS = {"get", "first", "last", "latest", "earliest", "get_or_create",
                        "update_or_create", "in_bulk"}
SQLA_TERMINALS = {"get", "first", "one", "one_or_none", "scalar", "scalar_one",
                  "scalar_one_or_none", "get_or_404", "first_or_404", "one_or_404"}
MAYBE_NONE = {"first", "last", "one_or_none", "scalar", "scalar_one_or_none", "get_by_id",
              "get_by_key_name", "get"}
MUTATING_METHODS = {"append", "extend", "update", "pop", "remove", "insert", "setdefault", "clear",
                    "add", "discard"}
#: Django's manager attributes: ``Model.objects``, and the ones generic code reaches for
MANAGERS = frozenset({"objects", "_default_manager", "_base_manager"})
ORM_MARKERS = {"objects", "_default_manager", "_base_manager", "filter", "filter_by", "exclude", "query",
               "where", "session", "scalars", "scalar", "execute", "all", "select_related", "prefetch_related",
               "using"}
#: what a racing insert raises: the driver's error, or a project's (or oslo.db's) wrapper of
#: it (``DBDuplicateEntry``, ``ConstraintCheck``)
INTEGRITY_ERRORS = re.compile(r"IntegrityError|UniqueViolation|Constraint\w*|\w*Duplicate\w*")
#: what a lookup raises when the row is missing: Django's and SQLAlchemy's, and a project's
#: own ``ZoneNotFound`` / ``NotFound`` (repositories and services name theirs that way)
NOT_FOUND_ERRORS = re.compile(r"DoesNotExist|NoResultFound|ObjectDoesNotExist|Http404|\w*NotFound\b")


#: calls of a lookup chain whose keyword arguments (Django) or ``M.col == v`` arguments
#: (SQLAlchemy) name the columns the lookup compares
LOOKUP_CALLS = frozenset({"filter", "filter_by", "where", "get", "get_or_none", "get_object_or_404",
                          "get_or_404", "first_or_404", "one_or_404"})


#: a session's methods that run the statement they are given: its lookup is the statement's
STATEMENT_RUNNERS = frozenset({"scalar", "scalars", "execute", "exec"})


def lookup_columns(call: cst.Call) -> Optional[frozenset[str]]:
    """The columns a lookup compares for equality: ``{"a", "b"}`` for ``filter(a=x, b=y)``,
    ``filter_by(a=x)``, ``where(M.a == x)``, ``get(pk=x)`` or ``session.get(M, x)`` (the
    primary key, ``id``).  None when any condition is not a plain equality (``Q()``,
    ``a__in=``, ``**kwargs``, ``or_()``): then the columns are not known."""
    columns: set[str] = set()
    _, calls, _ = chain(call)
    for c in calls:
        term = terminal(c)
        if term in STATEMENT_RUNNERS and c.args and isinstance(c.args[0].value, cst.Call) and \
                c.args[0].keyword is None:
            inner = lookup_columns(c.args[0].value)     # ``session.scalar(select(M).where(M.a == x))``
            if inner is not None:
                columns |= inner
            continue
        if term not in LOOKUP_CALLS:
            continue
        args = list(c.args)
        if term in ("get", "get_or_404") and len(args) == 2 and all(a.keyword is None for a in args):
            columns.add("id")                       # session.get(Model, ident)
            continue
        if term == "get_object_or_404" and args and args[0].keyword is None:
            args = args[1:]                         # get_object_or_404(Model, pk=...)
        for arg in args:
            if arg.star:
                return None
            if arg.keyword is not None:
                name = arg.keyword.value
                for suffix in ("__exact", "__iexact"):
                    if name.endswith(suffix):
                        name = name[: -len(suffix)]
                if "__" in name:
                    return None                     # a range, an ``in``, a join: not one value
                columns.add(name)
                continue
            value = arg.value
            if isinstance(value, cst.Comparison) and len(value.comparisons) == 1 and \
                    isinstance(value.comparisons[0].operator, cst.Equal) and \
                    isinstance(value.left, cst.Attribute):
                columns.add(value.left.attr.value)
                continue
            return None
    return frozenset(columns) if columns else None


#: methods that change the object they are called on (``items.append(x)`` sets ``items``)
_FILLING_METHODS = frozenset({"append", "extend", "add", "update", "insert", "setdefault", "appendleft"})


def assigned_names(node: cst.CSTNode) -> frozenset[str]:
    """The variables a statement or block sets: assignment targets (the root name of
    ``a.b[c] = ...``), loop and ``with`` targets, and lists or sets it fills
    (``objs.append(M(...))``)."""
    out: set[str] = set()

    def root(expr: cst.BaseExpression) -> None:
        while isinstance(expr, (cst.Attribute, cst.Subscript)):
            expr = expr.value
        if isinstance(expr, cst.Name):
            out.add(expr.value)
        elif isinstance(expr, (cst.Tuple, cst.List)):
            for el in expr.elements:
                root(el.value)

    for n in walk_nodes(node):
        if isinstance(n, cst.AssignTarget):
            root(n.target)
        elif isinstance(n, (cst.AugAssign, cst.AnnAssign)):
            root(n.target)
        elif isinstance(n, (cst.For, cst.CompFor)):
            root(n.target)
        elif isinstance(n, cst.AsName):
            root(n.name)
        elif isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and \
                n.func.attr.value in _FILLING_METHODS:
            root(n.func.value)
    return frozenset(out)


def branches(node: cst.If) -> list[cst.BaseSuite]:
    """The blocks of an ``if`` / ``elif`` / ``else`` chain."""
    out: list[cst.BaseSuite] = []
    current: Optional[cst.CSTNode] = node
    while isinstance(current, cst.If):
        out.append(current.body)
        current = current.orelse
    if current is not None:
        out.append(current.body)
    return out


#: method names that, by convention, read and change nothing (``row.get_deferred_fields()``)
_READERS = ("get_", "is_", "has_", "can_", "as_", "to_")


def may_write_row(method: str) -> bool:
    """Whether ``row.method()`` may write the row (an accessor by its name does not)."""
    return not method.startswith(_READERS)
