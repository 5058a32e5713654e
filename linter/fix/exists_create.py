"""Exists-then-create (TXN105): ``if not Model.objects.filter(k=v).exists():
Model.objects.create(k=v, ...)`` becomes ``Model.objects.get_or_create(k=v, defaults={...})``.

Always **unsafe**, and never the whole fix: ``get_or_create()`` closes the race only when a
unique constraint covers the looked-up fields (without one two requests can still both
insert), and it raises ``MultipleObjectsReturned`` where the ``exists()`` check let several
rows be.  The constraint is written out in the fix's note for the user to add with its
migration; no migration is ever written."""
from __future__ import annotations

from typing import Optional

import libcst as cst

from ..facts.model import Finding
from .edits import line_edits
from .model import Applicability, Fix
from .shapes import only_small
from .source import FileSource


def _manager_call(call: cst.BaseExpression, method: str) -> Optional[tuple[str, list[cst.Arg]]]:
    """(``Model``, keyword args) of ``Model.objects.<method>(k=v, ...)``."""
    if not isinstance(call, cst.Call) or not isinstance(call.func, cst.Attribute) \
            or call.func.attr.value != method:
        return None
    manager = call.func.value
    if not isinstance(manager, cst.Attribute) or manager.attr.value != "objects" \
            or not isinstance(manager.value, cst.Name):
        return None
    if not call.args or any(a.keyword is None or a.star for a in call.args):
        return None
    return manager.value.value, list(call.args)


def exists_create_fix(src: FileSource, finding: Finding) -> Optional[Fix]:
    loc = src.at(finding.line)
    if loc is None or loc.function is None or len(loc.block.body) != 1:
        return None
    small = only_small(loc.statement)
    if not isinstance(small, cst.Expr):
        return None
    create = _manager_call(small.value, "create")
    guard = loc.guarding_if()
    if create is None or guard is None or guard.orelse is not None \
            or not isinstance(guard.test, cst.UnaryOperation) \
            or not isinstance(guard.test.operator, cst.Not):
        return None
    exists = guard.test.expression
    if not isinstance(exists, cst.Call) or exists.args or not isinstance(exists.func, cst.Attribute) \
            or exists.func.attr.value != "exists":
        return None
    lookup = _manager_call(exists.func.value, "filter")
    if lookup is None or lookup[0] != create[0]:
        return None
    model = create[0]
    keys = {a.keyword.value: src.code(a.value) for a in lookup[1]}              # type: ignore[union-attr]
    values = {a.keyword.value: src.code(a.value) for a in create[1]}            # type: ignore[union-attr]
    if any("__" in k or values.get(k) != v for k, v in keys.items()):
        return None
    rest = {k: v for k, v in values.items() if k not in keys}
    args = ", ".join(f"{k}={v}" for k, v in keys.items())
    if rest:
        args += ", defaults={" + ", ".join(f'"{k}": {v}' for k, v in rest.items()) + "}"
    new = cst.parse_statement(f"{model}.objects.get_or_create({args})\n",
                              config=src.module.config_for_parsing)
    assert isinstance(new, cst.SimpleStatementLine)
    new = new.with_changes(leading_lines=guard.leading_lines,
                           trailing_whitespace=loc.statement.trailing_whitespace)
    tree = src.module.deep_replace(guard, new)
    fields = ", ".join(f'"{k}"' for k in keys)
    name = "_".join(["unique", model.lower(), *keys])
    note = (f"get_or_create() settles the race only with a unique constraint on ({', '.join(keys)}): "
            f"add models.UniqueConstraint(fields=[{fields}], name=\"{name}\") to {model}.Meta.constraints "
            f"and its migration (not written for you)")
    return Fix(f"`{model}.objects.get_or_create({', '.join(keys)}=...)` instead of exists() then "
               f"create() (raises MultipleObjectsReturned where several rows match)",
               Applicability.UNSAFE, line_edits(src.text, tree.code), note)
