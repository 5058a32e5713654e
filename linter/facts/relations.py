"""Relations that models declare: a change through one writes other rows, not the row's columns.

``profile.languages.add(lang)`` (a Django many-to-many), ``order.lines.append(Line(...))``
(a SQLAlchemy ``relationship``) or ``user.groups.clear()`` insert or delete rows of another
table (the link table, the child's table); nothing of the row the method is called on is
read back and written over.  ``x.tags.append(t)`` on a JSON or array column, by contrast,
changes the column's old value in place, and saving ``x`` writes the whole list back: a
read-modify-write.  The walk tells the two apart with these facts, read from the ``ast``
of model classes, for Django and SQLAlchemy alike:

* Django: ``ManyToManyField``, ``GenericRelation`` and ``ForeignKey``/``OneToOneField``
  fields; the reverse side of each, on the model it points to (its ``related_name``, else
  Django's default ``<model>_set``);
* SQLAlchemy: ``relationship(...)`` / ``db.relationship(...)``, ``association_proxy(...)``
  and ``dynamic_loader(...)`` attributes; the ``backref`` a relationship declares, on the
  model it points to.

Models are known by class name, as everywhere in the linter (``RELATED_ANY`` holds the
relations of every model, for a row whose model the walk cannot name).
"""
from __future__ import annotations

import ast
import re
from typing import Iterable, Optional

from .ast_names import field_calls, last_name
from .tree_nodes import tree_nodes

Relations = dict[str, frozenset[str]]

#: a row of unknown model: a name that is a relation of any model the project declares
RELATED_ANY = "*"

_HINT = re.compile(r"ManyToMany|ForeignKey|OneToOne|GenericRelation|relationship|association_proxy|"
                   r"dynamic_loader|backref")
_DJANGO_MANY = {"ManyToManyField", "GenericRelation"}
_DJANGO_ONE = {"ForeignKey", "OneToOneField", "ParentalKey", "ParentalManyToManyField"}
_SQLA = {"relationship", "association_proxy", "dynamic_loader", "relation"}


def _kwarg(call: ast.Call, name: str) -> Optional[ast.AST]:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _target(call: ast.Call) -> Optional[str]:
    """The model a relation points to: ``ForeignKey("app.Order")``, ``relationship(Order)``,
    ``to="Order"``."""
    node = call.args[0] if call.args else _kwarg(call, "to") or _kwarg(call, "argument")
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.rsplit(".", 1)[-1] or None
    name = last_name(node) if node is not None else ""
    return name or None


def _string(node: Optional[ast.AST]) -> Optional[str]:
    if isinstance(node, ast.Call) and node.args:          # backref("name", lazy="dynamic")
        node = node.args[0]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _class_relations(cls: ast.ClassDef, found: dict[str, set[str]]) -> None:
    """Add the relations ``cls`` declares to ``found`` (its own, and the reverse sides on
    the models they point to)."""
    for name, call in field_calls(cls):
        kind = last_name(call)
        if kind in _DJANGO_MANY | _DJANGO_ONE:
            found.setdefault(cls.name, set()).add(name)
            target = _target(call)
            reverse = _string(_kwarg(call, "related_name"))
            if target == "self":
                target = cls.name
            if target and reverse and not reverse.endswith("+"):
                found.setdefault(target, set()).add(reverse)
            elif target and reverse is None:
                found.setdefault(target, set()).add(cls.name.lower() + "_set")
        elif kind in _SQLA:
            found.setdefault(cls.name, set()).add(name)
            target = _target(call)
            backref = _string(_kwarg(call, "backref"))
            if target and backref:
                found.setdefault(target, set()).add(backref)


def relations(sources: Iterable[tuple[str, ast.AST]]) -> Relations:
    """Model class name -> the attributes that are relations (over all ``sources``)."""
    found: dict[str, set[str]] = {}
    for text, tree in sources:
        if not _HINT.search(text):
            continue
        for cls in tree_nodes(tree).classes:
            _class_relations(cls, found)
    return {model: frozenset(names) for model, names in found.items()}


def merge(into: dict[str, set[str]], found: Iterable[tuple[str, frozenset[str]]]) -> None:
    for model, names in found:
        into.setdefault(model, set()).update(names)


def finish(found: dict[str, set[str]]) -> Relations:
    """The project's relations, with ``RELATED_ANY`` (every model's) for rows of unknown model."""
    if not found:
        return {}
    out = {model: frozenset(names) for model, names in found.items()}
    out[RELATED_ANY] = frozenset().union(*out.values())
    return out


def is_relation(known: Relations, model: Optional[str], attr: str) -> bool:
    """Whether ``attr`` of a row of ``model`` (None: not known) is a relation."""
    if model is not None and model in known:
        return attr in known[model]
    return attr in known.get(RELATED_ANY, ())
