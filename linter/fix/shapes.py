"""The statement shapes the fixes rewrite, recognised exactly (anything else: no fix).

A counter (``x.n += d``, ``x.n = x.n + d``, ``x.n = d + x.n``, ``-`` too), a Django
``x.save()`` or ``x.save(update_fields=[...])``, the one statement that binds a name in
a function, and the model class a read names."""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import libcst as cst

from .uses import attribute_of, names_in

_ATOMS = (cst.Name, cst.Attribute, cst.Integer, cst.Float, cst.Call, cst.Subscript,
          cst.SimpleString)


@dataclasses.dataclass(frozen=True)
class Counter:
    """``obj.field`` changed by ``op`` (``+`` or ``-``) and ``delta``, in ``statement``."""

    obj: str
    field: str
    op: str
    delta: cst.BaseExpression
    statement: cst.SimpleStatementLine


def only_small(stmt: cst.CSTNode) -> Optional[cst.BaseSmallStatement]:
    """The one small statement of a line that holds nothing else."""
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        return stmt.body[0]
    return None


def counter(stmt: cst.CSTNode) -> Optional[Counter]:
    small = only_small(stmt)
    if isinstance(small, cst.AugAssign):
        op = {cst.AddAssign: "+", cst.SubtractAssign: "-"}.get(type(small.operator))
        target, delta = small.target, small.value
    elif isinstance(small, cst.Assign) and len(small.targets) == 1 \
            and isinstance(small.value, cst.BinaryOperation):
        target, value = small.targets[0].target, small.value
        op = {cst.Add: "+", cst.Subtract: "-"}.get(type(value.operator))
        if _same_attribute(value.left, target):
            delta = value.right
        elif op == "+" and _same_attribute(value.right, target):
            delta = value.left
        else:
            return None
    else:
        return None
    if op is None or not isinstance(target, cst.Attribute) or not isinstance(target.value, cst.Name):
        return None
    obj = target.value.value
    if obj in names_in(delta):
        return None
    return Counter(obj, target.attr.value, op, delta, stmt)  # type: ignore[arg-type]


def _same_attribute(node: cst.BaseExpression, target: cst.BaseExpression) -> bool:
    return isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name) \
        and not node.lpar and attribute_of(node, target.value.value) == target.attr.value


def delta_code(module: cst.Module, delta: cst.BaseExpression) -> str:
    """``delta`` as it can follow ``F("n") +`` without changing its meaning."""
    code = module.code_for_node(delta)
    if isinstance(delta, _ATOMS) or delta.lpar:
        return code
    return f"({code})"


@dataclasses.dataclass(frozen=True)
class Save:
    """A Django ``obj.save()``: ``fields`` None for the whole row, else the
    ``update_fields`` strings (``elements``: their nodes, ``bracket``: ``[]`` or ``()``)."""

    obj: str
    fields: Optional[tuple[str, ...]]
    elements: tuple = ()
    bracket: str = "[]"


def django_save(stmt: cst.CSTNode) -> Optional[Save]:
    small = only_small(stmt)
    if not isinstance(small, cst.Expr) or not isinstance(small.value, cst.Call):
        return None
    call = small.value
    func = call.func
    if not isinstance(func, cst.Attribute) or func.attr.value != "save" \
            or not isinstance(func.value, cst.Name):
        return None
    obj = func.value.value
    if not call.args:
        return Save(obj, None)
    if len(call.args) != 1 or call.args[0].keyword is None \
            or call.args[0].keyword.value != "update_fields":
        return None
    value = call.args[0].value
    if not isinstance(value, (cst.List, cst.Tuple)):
        return None
    fields = []
    for el in value.elements:
        if not isinstance(el, cst.Element) or not isinstance(el.value, cst.SimpleString):
            return None
        text = el.value.evaluated_value
        if not isinstance(text, str):
            return None
        fields.append(text)
    return Save(obj, tuple(fields), tuple(el.value for el in value.elements),
                "[]" if isinstance(value, cst.List) else "()")


class _Bindings(cst.CSTVisitor):
    """Statements that bind ``name`` (``name = ...``, ``for name in ...``, ``with ... as
    name``, a parameter), nested functions and classes left out."""

    def __init__(self, name: str, root: cst.FunctionDef) -> None:
        self.name = name
        self.root = root
        self.values: list[Optional[cst.BaseExpression]] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node is self.root

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_Param(self, node: cst.Param) -> None:
        if node.name.value == self.name:
            self.values.append(None)

    def visit_Assign(self, node: cst.Assign) -> None:
        for t in node.targets:
            if isinstance(t.target, cst.Name) and t.target.value == self.name:
                self.values.append(node.value)
            elif self.name in names_in(t.target) and not isinstance(t.target, cst.Attribute):
                self.values.append(None)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if isinstance(node.target, cst.Name) and node.target.value == self.name:
            self.values.append(node.value)

    def visit_For(self, node: cst.For) -> None:
        if self.name in names_in(node.target):
            self.values.append(None)

    def visit_AsName(self, node: cst.AsName) -> None:
        if self.name in names_in(node.name):
            self.values.append(None)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        if self.name in names_in(node.target):
            self.values.append(None)


def only_binding(function: cst.FunctionDef, name: str) -> Optional[cst.BaseExpression]:
    """The value of the one assignment that binds ``name`` in ``function``; None when it
    is bound otherwise (a parameter, a loop) or more than once."""
    finder = _Bindings(name, function)
    function.visit(finder)
    return finder.values[0] if len(finder.values) == 1 else None


def django_manager_root(expr: cst.BaseExpression) -> Optional[tuple[str, Optional[cst.BaseExpression]]]:
    """(``Model``, the database alias a ``.using(alias)`` in the chain names, else None)
    when ``expr`` is a read through ``Model.objects`` (``Model.objects.get(...)``,
    ``Model.objects.using(db).filter(...).first()``); None for any other read, or a chain
    with ``db_manager()`` or more than one ``using()``."""
    node = expr
    aliases = []
    while isinstance(node, (cst.Call, cst.Attribute)):
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) \
                and node.func.attr.value in ("using", "db_manager"):
            if node.func.attr.value == "db_manager" or len(node.args) != 1 or node.args[0].keyword:
                return None
            aliases.append(node.args[0].value)
        if isinstance(node, cst.Attribute) and node.attr.value == "objects" \
                and isinstance(node.value, cst.Name):
            return (node.value.value, aliases[0] if aliases else None) if len(aliases) < 2 else None
        node = node.func if isinstance(node, cst.Call) else node.value
    return None


_SQLA_READS = {"get", "query", "select", "get_or_404"}


def sqlalchemy_model(expr: cst.BaseExpression) -> Optional[str]:
    """The mapped class a SQLAlchemy read names: ``session.get(Post, pid)``,
    ``session.query(Post)...``, ``session.scalars(select(Post)...)``, ``Post.query...``;
    None when it names none for certain."""
    node = expr
    while isinstance(node, (cst.Call, cst.Attribute)):
        if isinstance(node, cst.Attribute) and node.attr.value == "query" \
                and isinstance(node.value, cst.Name):
            return node.value.value
        node = node.func if isinstance(node, cst.Call) else node.value
    for call in _walk_calls(expr):
        func = call.func
        name = func.attr.value if isinstance(func, cst.Attribute) else \
            func.value if isinstance(func, cst.Name) else None
        positional = [a for a in call.args if a.keyword is None and not a.star]
        wanted = 2 if name == "get" else 1      # session.get(Model, pk); query(Model), select(Model)
        if name in _SQLA_READS and len(positional) >= wanted \
                and isinstance(positional[0].value, cst.Name):
            return positional[0].value.value
    return None


def _walk_calls(expr: cst.BaseExpression) -> Sequence[cst.Call]:
    found: list[cst.Call] = []

    class _Calls(cst.CSTVisitor):
        def visit_Call(self, n: cst.Call) -> None:
            found.append(n)
    expr.visit(_Calls())
    return found


def class_defines(module: cst.Module, class_name: str, method: str) -> bool:
    """Whether a top-level class ``class_name`` of ``module`` defines ``method``."""
    for stmt in module.body:
        if isinstance(stmt, cst.ClassDef) and stmt.name.value == class_name:
            body = stmt.body.body if isinstance(stmt.body, cst.IndentedBlock) else ()
            return any(isinstance(s, cst.FunctionDef) and s.name.value == method for s in body)
    return False
