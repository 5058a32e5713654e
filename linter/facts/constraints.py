"""Unique keys that models declare: an insert they cover cannot duplicate a row.

A check-then-act (``if not M.objects.filter(code=c).exists(): M.objects.create(code=c)``)
loses nothing when ``code`` is unique: the second of two racing inserts fails with
``IntegrityError`` instead of adding a duplicate.  This module reads those keys from
the ``ast`` of model classes, for Django and SQLAlchemy alike:

* Django: ``unique=True`` and ``primary_key=True`` fields, ``OneToOneField``,
  ``Meta.unique_together`` and ``Meta.constraints`` with ``UniqueConstraint(fields=...)``;
* SQLAlchemy: ``Column(..., unique=True)`` / ``mapped_column(..., primary_key=True)`` and
  ``__table_args__`` entries ``UniqueConstraint("a", "b")``, ``PrimaryKeyConstraint``
  and ``Index(..., unique=True)``; classical mappings too: a ``Table(...)`` with such
  columns and constraints, mapped by ``mapper(Cls, table)``, ``map_imperatively`` or
  ``__table__ = table``.

A relation ``user`` and its column ``user_id`` are one column (``column()``), as is ``pk`` and ``id``.
A model inherits the keys its bases declare (``class Order(AbstractOrder)``: ``inherit_keys``,
applied over the whole project's classes).
The models libraries ship (``django.contrib.auth``'s ``Group``) have their keys in
``LIBRARY_KEYS``, looked up by the module a file imports them from.
Models are known by class name, as everywhere in the linter.  Partial unique indexes
(with a condition) still count: the linter cannot tell whether the insert meets the condition.
"""
from __future__ import annotations

import ast
import re
from typing import Iterable

from .ast_names import field_calls, is_declared_attr, last_name
from .syntax import is_model_name
from .tree_nodes import tree_nodes

UniqueKeys = dict[str, list[frozenset[str]]]

_HINT = re.compile(r"unique|Unique|primary_key|OneToOneField|PrimaryKeyConstraint")
_ONE_TO_ONE = {"OneToOneField"}


def _true_kwarg(call: ast.Call, name: str) -> bool:
    return any(k.arg == name and isinstance(k.value, ast.Constant) and k.value.value is True
               for k in call.keywords)


def _strings(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [s for el in node.elts for s in _strings(el)]
    if isinstance(node, ast.Attribute):          # Column objects: Index("ix", Model.a, unique=True)
        return [node.attr]
    if isinstance(node, ast.Name):
        return [node.id]
    return []


def column(name: str) -> str:
    """One spelling per column: ``user_id`` is the ``user`` relation's column, ``pk`` is ``id``."""
    if name == "pk":
        return "id"
    return name[:-3] if name.endswith("_id") and len(name) > 3 else name


def _field_keys(cls: ast.ClassDef) -> list[frozenset[str]]:
    """Fields declared unique one by one; the ``primary_key=True`` fields together are one
    key (two of them make a composite primary key, unique only as a pair)."""
    keys: list[frozenset[str]] = []
    primary: set[str] = set()
    for target, value in field_calls(cls):
        kind = last_name(value)
        if _true_kwarg(value, "primary_key"):
            primary.add(target)
        elif kind in _ONE_TO_ONE or _true_kwarg(value, "unique"):
            keys.extend(frozenset({name}) for name in _spellings(target, value))
    if primary:
        keys.append(frozenset(primary))
    return keys


def _spellings(target: str, value: ast.Call) -> set[str]:
    """The names a unique field is looked up and set by: its attribute, the column name a
    ``Column("email", ...)`` gives it, and, for a private attribute (``_email``, behind an
    ``email`` property or hybrid), the public name its callers use."""
    names = {target, target.lstrip("_") or target}
    if value.args and isinstance(value.args[0], ast.Constant) and isinstance(value.args[0].value, str):
        names.add(value.args[0].value)
    return names


def _declared_keys(node: ast.AST) -> list[list[str]]:
    """Unique column lists in ``Meta.unique_together``, ``constraints`` or ``__table_args__``."""
    out: list[list[str]] = []
    for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
        kind = last_name(call)
        if kind in ("UniqueConstraint", "PrimaryKeyConstraint"):
            fields = [s for k in call.keywords if k.arg == "fields" for s in _strings(k.value)]
            out.append(fields or [s for a in call.args for s in _strings(a)])
        elif kind == "Index" and _true_kwarg(call, "unique"):
            out.append([s for a in call.args[1:] for s in _strings(a)])
    return out


def _meta_keys(cls: ast.ClassDef) -> list[list[str]]:
    out: list[list[str]] = []
    for stmt in cls.body:
        if isinstance(stmt, ast.ClassDef) and stmt.name == "Meta":
            for inner in stmt.body:
                if isinstance(inner, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "unique_together"
                                                         for t in inner.targets):
                    value = inner.value
                    groups = value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]
                    if groups and all(isinstance(g, ast.Constant) for g in groups):
                        groups = [value]          # unique_together = ("a", "b")
                    out.extend(_strings(g) for g in groups)
                elif isinstance(inner, ast.Assign):
                    out.extend(_declared_keys(inner.value))
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            # ``__table_args__ = (...)``, or the same tuple kept under another name that a
            # base's ``@declared_attr __table_args__`` returns (rucio's ``_table_args``): a
            # constraint built in a class body is the class's table's
            out.extend(_declared_keys(stmt.value))
        elif is_declared_attr(stmt) and stmt.name == "__table_args__":
            out.extend(_declared_keys(stmt))      # ``@declared_attr def __table_args__(cls): ...``
    return out


def _table_keys(call: ast.Call) -> list[list[str]]:
    """Unique column lists of a ``Table("name", metadata, Column("c", unique=True), ...)``."""
    out = _declared_keys(ast.Tuple(elts=[a for a in call.args if last_name(a) != "Column"], ctx=ast.Load()))
    primary: list[str] = []
    for arg in call.args:
        if isinstance(arg, ast.Call) and last_name(arg) == "Column" and arg.args:
            if _true_kwarg(arg, "primary_key"):
                primary.extend(_strings(arg.args[0]))
            elif _true_kwarg(arg, "unique"):
                out.append(_strings(arg.args[0]))
    if primary:
        out.append(primary)           # several primary-key columns: one composite key
    return out


def _imperative_tables(tree: ast.AST) -> dict[str, list[list[str]]]:
    """Classical mappings: ``t = Table(...)`` then ``mapper(Cls, t)`` / ``map_imperatively(Cls, t)``
    (ckan, mailman and other pre-declarative code)."""
    tables: dict[str, list[list[str]]] = {}
    mapped: dict[str, list[list[str]]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and last_name(node.value) == "Table":
            for target in node.targets:
                if isinstance(target, ast.Name):
                    tables[target.id] = _table_keys(node.value)
    if not tables:
        return mapped
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and last_name(node) in ("mapper", "map_imperatively") and len(node.args) >= 2:
            cls, table = node.args[0], node.args[1]
            if isinstance(cls, ast.Name) and isinstance(table, ast.Name) and table.id in tables:
                mapped.setdefault(cls.id, []).extend(tables[table.id])
        elif isinstance(node, ast.ClassDef):
            for stmt in node.body:
                if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Name) and \
                        stmt.value.id in tables and any(isinstance(t, ast.Name) and t.id == "__table__"
                                                        for t in stmt.targets):
                    mapped.setdefault(node.name, []).extend(tables[stmt.value.id])
    return mapped


def unique_keys(sources: Iterable[tuple[str, ast.AST]]) -> UniqueKeys:
    """Model class name -> the column sets it declares unique (over all ``sources``)."""
    found: UniqueKeys = {}
    for text, tree in sources:
        if not _HINT.search(text):
            continue
        declared: dict[str, list] = {}
        for cls in tree_nodes(tree).classes:
            declared.setdefault(cls.name, []).extend(_field_keys(cls) + [k for k in _meta_keys(cls) if k])
        if "Table(" in text:
            for cls, keys in _imperative_tables(tree).items():
                declared.setdefault(cls, []).extend(k for k in keys if k)
        for cls, keys in declared.items():
            if keys:
                found.setdefault(cls, []).extend(frozenset(map(column, k)) for k in keys)
    return found


#: Unique keys of the models libraries ship, by the module a file imports them from:
#: ``Group.objects.get(name=n)`` then ``Group.objects.create(name=n)`` cannot make two
#: groups, ``auth_group.name`` is unique, though no file of the project declares it.
LIBRARY_KEYS: dict[tuple[str, str], list[frozenset[str]]] = {
    ("django.contrib.auth.models", "Group"): [frozenset({"name"})],
    ("django.contrib.auth.models", "User"): [frozenset({"username"})],
    ("django.contrib.auth.models", "Permission"): [frozenset({"content_type", "codename"})],
    ("django.contrib.contenttypes.models", "ContentType"): [frozenset({"app_label", "model"})],
    ("django.contrib.sites.models", "Site"): [frozenset({"domain"})],
    ("rest_framework.authtoken.models", "Token"): [frozenset({"key"}), frozenset({"user"})],
    ("allauth.socialaccount.models", "SocialAccount"): [frozenset({"provider", "uid"})],
}


def class_bases(tree: ast.AST) -> dict[str, tuple[str, ...]]:
    """Class -> the last names of its bases, for classes that have some (``class
    Order(AbstractOrder)``): a model inherits the unique keys its bases declare."""
    return {node.name: tuple(b for b in map(last_name, node.bases) if b and b.lstrip("_")[:1].isupper())
            for node in tree_nodes(tree).classes if node.bases}


#: the base every Django model ends in (``models.Model``), and Flask-SQLAlchemy's ``db.Model``
_MODEL_ROOTS = frozenset({"Model"})


def bound_classes(tree: ast.AST) -> frozenset[str]:
    """CamelCase names a module binds to what a call returns (``UserForumPermission =
    get_model("forum_permission", "UserForumPermission")``, ``User = get_user_model()``,
    ``Post = model_factory(AbstractPost)``): the project's models when it makes them at
    import time, classes it defines as much as a ``class`` statement does."""
    body = tree.body if isinstance(tree, ast.Module) else []
    return frozenset(stmt.targets[0].id for stmt in body
                     if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                     and isinstance(stmt.targets[0], ast.Name) and isinstance(stmt.value, ast.Call)
                     and is_model_name(stmt.targets[0].id))


def declared_models(bases: "dict[str, tuple[str, ...]] | dict[str, list[str]]") -> frozenset[str]:
    """Classes whose ancestry the project shows down to ``Model``: every base is ``Model``
    or such a class.  Their unique keys are all declared where the linter reads them; a
    model with a base from a library (``TimeStampedModel``, ``TaggedItemBase``) may
    inherit a key it cannot see."""
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for cls, names in bases.items():
            if cls not in found and names and all(n in _MODEL_ROOTS or n in found for n in names):
                found.add(cls)
                changed = True
    return frozenset(found)


def inherit_keys(keys: dict[str, list], bases: dict[str, tuple[str, ...]]) -> None:
    """Give each class the unique keys of its bases (an abstract model's fields are the
    concrete model's; a parent's unique column stays unique for its children), in place."""
    changed = True
    while changed:
        changed = False
        for cls, names in bases.items():
            for base in names:
                for key in keys.get(base, ()):
                    mine = keys.setdefault(cls, [])
                    if key not in mine:
                        mine.append(key)
                        changed = True


def covered(keys: list[frozenset[str]], given: frozenset[str] | None) -> bool:
    """Whether an insert that sets ``given`` (None: not known) meets a declared unique key."""
    if not keys:
        return False
    if given is None:
        return True            # the insert's values are not visible: the model's keys decide
    given = frozenset(map(column, given))
    return any(k <= given for k in keys)


def manager_attributes(sources: Iterable[tuple[str, ast.AST]]) -> frozenset[str]:
    """Names of the managers models declare besides ``objects``: ``all = ScopedManager()``,
    ``active = ActiveManager()``, ``live = LiveQuerySet.as_manager()`` (``Model.all.get()``
    reads a row as ``Model.objects.get()`` does)."""
    found: set[str] = set()
    for text, tree in sources:
        if "Manager" not in text and "as_manager" not in text:
            continue
        for cls in tree_nodes(tree).classes:
            for stmt in cls.body:
                if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and
                        isinstance(stmt.targets[0], ast.Name) and isinstance(stmt.value, ast.Call)):
                    continue
                func = stmt.value.func
                while isinstance(func, ast.Call):          # ``Manager.from_queryset(QS)()``
                    func = func.func
                last = last_name(func) if not isinstance(func, ast.Name) else func.id
                if last.endswith("Manager") or last in ("as_manager", "from_queryset"):
                    found.add(stmt.targets[0].id)
    return frozenset(found)
