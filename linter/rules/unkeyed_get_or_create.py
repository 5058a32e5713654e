"""TXN105, ``get_or_create()`` on a lookup no unique key covers.

Django's ``get_or_create()`` and ``update_or_create()`` are a check-then-act written as one
call: a ``get()``, then a ``create()`` when it found nothing.  Django's documentation says
they are atomic only "assuming that the database enforces uniqueness of the keyword
arguments": without a unique key on the looked-up fields, two requests both miss and both
insert, and from then on every ``get_or_create()`` of that lookup raises
``MultipleObjectsReturned`` (its ``get()`` finds two rows).  A double-clicked "favourite",
tag or vote is enough.

Reported only where the linter sees the model's whole ancestry (every base is ``Model`` or a
model of the project: ``facts.constraints.declared_models``), so its declared keys are all
the keys it has; a model with a base from a library may inherit a key the linter cannot see,
and a model reached through a relation (``user.tags.get_or_create(...)``) is not named.
A call under a lock, in a serializable transaction or after a row lock on a parent in the
same transaction is serialised and not reported.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import libcst as cst

from ..facts.constraints import column, declared_models
from ..facts.model import Check, CheckKind, Confidence
from ..facts.syntax import chain, names_in, terminal
from ..flow.events import Called
from . import severity
from .check_then_act import PRIMARY_KEY, model_keys

if TYPE_CHECKING:
    from ..flow.state import FunctionState

CODE = "TXN105"

_METHODS = frozenset({"get_or_create", "update_or_create", "aget_or_create", "aupdate_or_create"})
#: keyword arguments that are not part of the lookup
_NOT_LOOKUP = frozenset({"defaults", "create_defaults"})
#: queryset steps whose keyword arguments join the lookup (``filter(a=1).get_or_create(b=2)``)
_FILTERS = frozenset({"filter"})


def lookup_fields(call: cst.Call) -> Optional[frozenset[str]]:
    """The fields ``M.objects[.filter(..)].get_or_create(..)`` looks up (``email__iexact`` is
    ``email``); None when a ``**kwargs`` or a positional ``Q`` hides some."""
    _names, calls, _root = chain(call)
    fields: set[str] = set()
    for c in calls:
        if c is not call and terminal(c) not in _FILTERS:
            continue
        for a in c.args:
            if a.keyword is None:
                return None
            if a.keyword.value not in _NOT_LOOKUP:
                fields.add(column(a.keyword.value.split("__", 1)[0]))
    return frozenset(fields)


def _model(fa: "FunctionState", call: cst.Call) -> Optional[str]:
    """``Tagging`` of ``Tagging.objects.get_or_create(...)``, when its ancestry is declared."""
    names, _calls, root = chain(call)
    if not isinstance(root, cst.Name) or len(names) < 3 or not fa.manager_chain(names):
        return None
    model = names[0]
    declared = fa.mod.cfg.declared_models or declared_models(fa.mod.info.class_bases)
    if model not in declared and model in fa.mod.info.imports:
        model = fa.mod.info.imports[model][1]
    return model if model in declared or model in declared_models(fa.mod.info.class_bases) else None


def _minted_key(fa: "FunctionState", call: cst.Call) -> bool:
    """The lookup names a key this function has just made (an issue it opened, a row it
    inserted, a fresh token): no other request can look up the same one."""
    minted = fa.minted()
    return bool(minted) and any(a.keyword is not None and a.keyword.value not in _NOT_LOOKUP and
                                names_in(a.value) & minted for a in call.args)


def message(model: str, method: str, line: int, fields: frozenset[str]) -> str:
    looked_up = ", ".join(sorted(fields))
    return (f"{CODE} check-then-act: `{model}.objects.{method}()` at line {line} looks up "
            f"({looked_up}), which no unique key of `{model}` covers: two requests can both miss "
            f"and both insert, and every later {method}() of it raises MultipleObjectsReturned; "
            f"add a UniqueConstraint on those fields (get_or_create() relies on one)")


def on_call(fa: "FunctionState", event: Called) -> None:
    """The verdict on a call the walk met (subscribed to ``CALL``)."""
    call = event.node
    method = terminal(call)
    if method not in _METHODS:
        return
    model = _model(fa, call)
    fields = lookup_fields(call) if model else None
    if not model or not fields or fields & PRIMARY_KEY:
        return
    if any(key <= fields for key in model_keys(fa).get(model, [])):
        return
    if fa.protected_now() or _minted_key(fa, call):
        return
    check = Check(event.line, CheckKind.NONE, f"`{method}()`'s lookup", event.scopes, False,
                  frozenset({model}))
    check.lookup = fields
    check.keys = set(names_in(call))
    check.single_row = True
    fa.report(call, CODE, message(model, method, event.line, fields),
              assessment=severity.of_check(check, None), confidence=Confidence.MEDIUM)
