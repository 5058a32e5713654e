"""Where a changed value comes from: facts the walk uses to classify a mutation.

A read-modify-write loses an update only when the value written back was decided by the
read.  These helpers tell the walk (``flow/walk.py``) when a change that *looks* derived from
the row decides nothing from it, so that it is recorded as a blind write (a stale copy at
most, ``Confidence.LOW``) or not as a change of the row's columns at all:

* **identity**: a value built only from the row's primary key (``f"deleted-{user.pk}"``)
  is the same whoever reads the row: the key never changes;
* **relations**: ``x.languages.add(lang)``, ``x.lines.append(Line(...))``,
  ``x.options.clear()`` write rows of another table through a relation (``facts/relations.py``),
  not a column of ``x``;
* **request data**: a form or serializer (``def form_valid(self, form)``,
  ``perform_update(self, serializer)``) holds what the request sent; its ``save()`` writes
  those values, not a row the function read.
"""
from __future__ import annotations

from typing import Optional

import libcst as cst

from .relations import Relations, is_relation
from .syntax import dotted, is_model_name, walk_nodes

#: the primary key's spellings: the same for every reader of the row
IDENTITY = frozenset({"pk", "id"})
#: class-name endings (and parameter names) of objects that carry the request's values
_REQUEST_CLASSES = ("Form", "FormSet", "Serializer")
_REQUEST_PARAMS = ("form", "serializer", "formset")
#: annotations of a request's data in FastAPI and pydantic code (``tool: ToolCreate``,
#: ``body: PydanticTool``): a schema object, never an ORM row
_SCHEMA_SUFFIXES = ("Schema", "Create", "Update", "Payload", "Request", "DTO", "Body", "BaseModel")


def identity_only(value: cst.CSTNode, name: str) -> bool:
    """Whether every use of ``name`` in ``value`` reads only its primary key (``name.pk``,
    ``name.id``).  Locals computed from ``name`` are the caller's to check."""
    parents: dict[int, cst.Attribute] = {}
    attrs: set[int] = set()
    uses = 0
    for node in walk_nodes(value):
        if isinstance(node, cst.Attribute):
            parents[id(node.value)] = node
            attrs.add(id(node.attr))
        elif isinstance(node, cst.Name) and node.value == name and id(node) not in attrs:
            parent = parents.get(id(node))
            if parent is None or parent.attr.value not in IDENTITY:
                return False
            uses += 1
    return uses > 0


def relation_change(known: Relations, model: Optional[str], attr: str, call: cst.Call,
                    new_objects: dict) -> bool:
    """Whether ``row.attr.method(...)`` changes a relation (other rows), not a column of
    the row: ``attr`` is a relation the models declare, or the call adds a new model
    object (``x.logs.append(Log(...))``, ``x.items.append(item)`` of an ``Item(...)``)."""
    if is_relation(known, model, attr):
        return True
    for arg in call.args:
        value = arg.value
        if isinstance(value, cst.Call) and is_model_name(dotted(value.func).rsplit(".", 1)[-1]):
            return True
        if isinstance(value, cst.Name) and value.value in new_objects and \
                not new_objects[value.value].endswith(_REQUEST_CLASSES):
            return True
    return False


def request_data(param: cst.Param) -> bool:
    """Whether a parameter is a form, a serializer or a pydantic schema (by annotation, else
    by name)."""
    if param.annotation is not None:
        kind = dotted(param.annotation.annotation).rsplit(".", 1)[-1]
        if kind:
            return kind.endswith(_REQUEST_CLASSES + _SCHEMA_SUFFIXES) or kind.startswith("Pydantic")
    name = param.name.value
    return name in _REQUEST_PARAMS or name.endswith(tuple("_" + p for p in _REQUEST_PARAMS))


def request_object(value: cst.BaseExpression) -> bool:
    """Whether ``value`` builds a form or serializer (``EditUserForm(user)``,
    ``ProfileForm(request.POST, instance=profile)``, ``UserSerializer(user, data=...)``): the
    row it is given only fills in its initial values; what it holds once bound and validated
    is the request's, so a value taken from it derives nothing from the read (a blind write:
    ``user.primary_group_id = form.primary_group.data.id``)."""
    if not isinstance(value, cst.Call):
        return False
    return dotted(value.func).rsplit(".", 1)[-1].endswith(_REQUEST_CLASSES)
