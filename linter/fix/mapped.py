"""Whether ``session.add(M(k=v, ...))`` and ``insert(M).values(k=v, ...)`` write the same row.

They do when every keyword is a column declared on ``M`` under its own name and nothing
the ORM runs for a new object and Core does not runs for ``M``: a constructor of its own
(``__init__``), ``@validates``, dataclass mapping (``MappedAsDataclass``,
``default_factory``), ``__mapper_args__`` (a version counter, a polymorphic identity the ORM
fills in), mapper events (``before_insert``, ``init``).  A keyword that is a relationship, a
column property or a hybrid, or a column named otherwise in the table
(``Column("user_name", ...)``), is not a column Core's ``values()`` takes under that name.

The class is found where the fixed module binds it: defined there, or imported from a module
of the project (``from app.models import Tag``, ``from .models import Tag``); its bases are
judged the same way, up to a declarative base (``DeclarativeBase``, ``declarative_base()``,
Flask-SQLAlchemy's ``db.Model``).  Anything not found or not understood is a reason."""
from __future__ import annotations

import ast
import dataclasses
import os
from typing import Optional, Sequence

_COLUMN_CALLS = {"Column", "mapped_column"}
_ORM_ONLY_CALLS = {"relationship", "column_property", "synonym", "composite", "association_proxy",
                   "deferred", "query_expression", "relation", "backref", "dynamic_loader"}
_BASES = {"DeclarativeBase", "DeclarativeBaseNoMeta", "object", "AsyncAttrs"}
_MAX_DEPTH = 4
#: txnsafety's write-policy decorators: they register the class, its constructor is untouched
_POLICY_DECORATORS = {"never_written", "abstract", "embedded", "written_once", "written_in_transaction",
                      "written_with_user_lock", "written_in_transaction_or_user_lock",
                      "written_by_single_writer", "dangerously_written_outside_transaction",
                      "dangerously_written_outside_transaction_or_user_lock", "versioned"}


@dataclasses.dataclass(frozen=True)
class ModelModule:
    """A module's parsed text and where it lies (None: the fixed module itself, in memory)."""

    tree: ast.Module
    path: Optional[str]
    text: str = ""


def call_name(node: ast.AST) -> str:
    func = node.func if isinstance(node, ast.Call) else node
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _module_path(module: str, level: int, importer: Optional[str]) -> Optional[str]:
    """The file of ``module`` (``from module import ...`` in ``importer``, ``level`` dots)."""
    if importer is None:
        return None
    here = os.path.dirname(os.path.abspath(importer))
    parts = module.split(".") if module else []
    if level:
        base = here
        for _ in range(level - 1):
            base = os.path.dirname(base)
        roots = [base]
    else:
        roots = []
        root = here
        while True:                     # the file's ancestors, as sys.path roots
            roots.append(root)
            parent = os.path.dirname(root)
            if parent == root:
                break
            root = parent
    for root in roots:
        stem = os.path.join(root, *parts)
        for candidate in (stem + ".py", os.path.join(stem, "__init__.py")):
            if os.path.isfile(candidate):
                return candidate
    return None


def _parse(path: str) -> Optional[ModelModule]:
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        return ModelModule(ast.parse(text), path, text)
    except (OSError, SyntaxError, ValueError):
        return None


def find_class(name: str, where: ModelModule, depth: int = 0) -> Optional[tuple[ast.ClassDef, ModelModule]]:
    """The class ``name`` is bound to at the top of ``where``: defined there or imported
    from a module of the project (followed through re-exports)."""
    for stmt in where.tree.body:
        if isinstance(stmt, ast.ClassDef) and stmt.name == name:
            return stmt, where
    if depth >= _MAX_DEPTH:
        return None
    for stmt in where.tree.body:
        if isinstance(stmt, ast.ImportFrom):
            for alias in stmt.names:
                if (alias.asname or alias.name) == name:
                    path = _module_path(stmt.module or "", stmt.level, where.path)
                    found = _parse(path) if path else None
                    return find_class(alias.name, found, depth + 1) if found else None
    return None


def _declarative_names(where: ModelModule) -> set[str]:
    """Names bound in ``where`` to ``declarative_base()`` / ``registry().generate_base()``."""
    out = set()
    for stmt in where.tree.body:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call) \
                and call_name(stmt.value) in ("declarative_base", "generate_base"):
            out.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
    return out


def _listened(where: ModelModule, model: str) -> bool:
    """Whether ``where`` registers a mapper event for ``model``
    (``@event.listens_for(Model, ...)``, ``event.listen(Model, ...)``)."""
    for node in ast.walk(where.tree):
        if isinstance(node, ast.Call) and call_name(node) in ("listens_for", "listen") and node.args \
                and isinstance(node.args[0], ast.Name) and node.args[0].id == model:
            return True
    return False


def _class_problem(cls: ast.ClassDef) -> Optional[str]:
    """What in the class body the ORM runs for a new object and Core does not."""
    if any(call_name(d) not in _POLICY_DECORATORS for d in cls.decorator_list):
        return f"`{cls.name}` is decorated (mapped by a decorator): its constructor is not seen"
    for stmt in cls.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if stmt.name == "__init__":
                return f"`{cls.name}` has its own __init__, which an insert() would not run"
            if any(call_name(d) == "validates" for d in stmt.decorator_list):
                return f"`{cls.name}` validates attributes in Python (@validates)"
        targets = stmt.targets if isinstance(stmt, ast.Assign) else \
            [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "__mapper_args__" for t in targets):
            return f"`{cls.name}` has __mapper_args__ (a version counter or identity the ORM fills in)"
    for node in ast.walk(cls):
        if isinstance(node, ast.keyword) and node.arg == "default_factory":
            return f"`{cls.name}` computes defaults in Python (default_factory)"
    return None


def _columns(cls: ast.ClassDef) -> dict[str, bool]:
    """The attributes ``cls`` declares, each True when it is a column under its own name."""
    out: dict[str, bool] = {}
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            value = stmt.value
            out[stmt.target.id] = value is None or _plain_column(value)
        elif isinstance(stmt, ast.Assign):
            for t in stmt.targets:
                if isinstance(t, ast.Name):
                    out[t.id] = _plain_column(stmt.value)
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[stmt.name] = False          # a hybrid or a property
    return out


def _plain_column(value: ast.AST) -> bool:
    if not isinstance(value, ast.Call) or call_name(value) not in _COLUMN_CALLS:
        return False
    named = value.args and isinstance(value.args[0], ast.Constant) and isinstance(value.args[0].value, str)
    return not named


def _base_ok(base: ast.expr, where: ModelModule, depth: int) -> Optional[str]:
    """None when ``base`` is a declarative base or a class judged like the model; else why not."""
    name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else ""
    if name == "MappedAsDataclass":
        return "the model is mapped as a dataclass (its constructor computes defaults)"
    if name in _BASES or name in _declarative_names(where):
        return None
    if isinstance(base, ast.Attribute) and name == "Model":
        return None                                 # Flask-SQLAlchemy's db.Model
    if not isinstance(base, ast.Name) or depth >= _MAX_DEPTH:
        return f"its base `{name or '?'}` is not understood"
    found = find_class(name, where)
    if found is None:
        return f"its base `{name}` is not found in the project"
    cls, module = found
    return _class_and_bases_problem(cls, module, depth + 1)


def _class_and_bases_problem(cls: ast.ClassDef, where: ModelModule, depth: int) -> Optional[str]:
    """Why ``cls`` or one of its bases (judged at ``depth``) may not be written by a Core insert."""
    problem = _class_problem(cls)
    if problem is not None:
        return problem
    for base in cls.bases:
        problem = _base_ok(base, where, depth)
        if problem is not None:
            return problem
    return None


def core_insert_problem(model: str, keywords: Sequence[str], fixed: ModelModule) -> Optional[str]:
    """Why ``insert(model).values(**keywords)`` might not write what ``model(**keywords)``
    added to a session writes; None when it writes the same row."""
    found = find_class(model, fixed)
    if found is None:
        return f"the class `{model}` is not found in the project (its columns cannot be checked)"
    cls, where = found
    problem = _class_and_bases_problem(cls, where, 1)
    if problem is not None:
        return problem
    if _listened(where, model) or _listened(fixed, model):
        return f"`{model}` has mapper events, which an insert() would not run"
    columns = _columns(cls)
    for key in keywords:
        if key not in columns:
            return f"`{key}` is not a column declared on `{model}`"
        if not columns[key]:
            return f"`{model}.{key}` is not a plain column (a relationship, a property or a renamed column)"
    return None
