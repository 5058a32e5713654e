"""The lock id of a row whose model declares ``@written_with_user_lock(fn)``, written before
the row is read: the runtime checker compares the lock held with ``fn(row)``, so the
user-write-lock fix must take exactly that lock, not one of its own making.

``fn`` (a lambda or a function of the model's module whose body returns one expression)
must read one attribute of the row and nothing else but constants (``lambda p: p.user_id``,
``return f"user:{row.user_id}"``); the read must look the row up by that attribute (Django
``get(user_id=uid)``; SQLAlchemy ``session.get(M, key)`` when it is the primary key).  The
attribute is then replaced by the looked-up value: ``f"user:{uid}"``.  Anything else is no
lock id, and no fix."""
from __future__ import annotations

import ast
from typing import Optional

import libcst as cst

from .mapped import ModelModule, call_name, find_class
from .source import FileSource


def _lock_function(arg: ast.expr, where: ModelModule) -> Optional[tuple[str, ast.expr]]:
    """(parameter, returned expression) of the policy's lock-id function."""
    if isinstance(arg, ast.Lambda) and len(arg.args.args) == 1 and not arg.args.vararg:
        return arg.args.args[0].arg, arg.body
    if not isinstance(arg, ast.Name):
        return None
    fn = next((s for s in where.tree.body if isinstance(s, ast.FunctionDef) and s.name == arg.id), None)
    if fn is None or len(fn.args.args) != 1 or fn.decorator_list:
        return None
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
        return None
    return fn.args.args[0].arg, body[0].value


def _only_attribute(param: str, expr: ast.expr) -> Optional[str]:
    """The one attribute of ``param`` that ``expr`` reads, when it reads nothing else but
    constants (no call, no other name)."""
    attrs = set()
    inside = set()
    for node in ast.walk(expr):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == param:
            attrs.add(node.attr)
            inside.add(id(node.value))
    for node in ast.walk(expr):
        if isinstance(node, (ast.Call, ast.Lambda, ast.Subscript, ast.NamedExpr)):
            return None
        if isinstance(node, ast.Name) and id(node) not in inside:
            return None
    return attrs.pop() if len(attrs) == 1 else None


def primary_key(cls: ast.ClassDef) -> Optional[str]:
    """The one attribute ``cls`` declares with ``primary_key=True``."""
    found = []
    for stmt in cls.body:
        target = stmt.target if isinstance(stmt, ast.AnnAssign) else \
            stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None
        value = stmt.value if isinstance(stmt, (ast.AnnAssign, ast.Assign)) else None
        if isinstance(target, ast.Name) and isinstance(value, ast.Call) and any(
                k.arg == "primary_key" and isinstance(k.value, ast.Constant) and k.value.value is True
                for k in value.keywords):
            found.append(target.id)
    return found[0] if len(found) == 1 else None


def policy_lock_id(src: FileSource, model: str, field: Optional[str], key: cst.BaseExpression) -> Optional[str]:
    """The code of ``fn(row)`` for the row a read of ``model`` by ``field`` (None: its
    primary key) equal to ``key`` returns; None when it cannot be written before the read."""
    found = find_class(model, ModelModule(ast.parse(src.text), src.path, src.text))
    if found is None:
        return None
    cls, where = found
    policy = next((d for d in cls.decorator_list
                   if isinstance(d, ast.Call) and call_name(d) == "written_with_user_lock"), None)
    function = _lock_function(policy.args[0], where) if policy is not None and len(policy.args) == 1 else None
    if function is None:
        return None
    param, expr = function
    attr = _only_attribute(param, expr)
    looked_up = field if field not in (None, "pk") else primary_key(cls) or ("id" if field == "pk" else None)
    if attr is None or attr != looked_up:
        return None
    segment = ast.get_source_segment(where.text, expr)
    if segment is None:
        return None

    class _Substitute(cst.CSTTransformer):
        def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
            if isinstance(original.value, cst.Name) and original.value.value == param and original.attr.value == attr:
                return key
            return updated
    return cst.Module([]).code_for_node(cst.parse_expression(segment).visit(_Substitute()))
