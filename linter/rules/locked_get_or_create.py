"""TXN105 for ``select_for_update().get_or_create(...)`` with no unique key on its lookup.

A row lock locks rows that exist. When the row is missing, two requests both run the
locking SELECT, both find nothing (there was nothing to lock, and READ COMMITTED does not
lock the gap), and both insert: two rows where the code meant one. ``get_or_create()`` is
atomic only when a unique key covers its lookup (Django's documentation says so); the
``select_for_update()`` in front tells that the author expected the lock to do that job.
Settled when a unique key (a field's ``unique=True``, ``unique_together``, a
``UniqueConstraint``, the primary key) lies within the lookup's columns.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import libcst as cst

from ..facts.constraints import column
from ..facts.syntax import terminal
from ..flow.events import LockedRead
from . import severity

if TYPE_CHECKING:
    from ..flow.state import FunctionState

CODE = "TXN105"
_MAKERS = frozenset({"get_or_create", "update_or_create"})
_NOT_LOOKUP = frozenset({"defaults", "create_defaults"})


def lookup(call: cst.Call) -> Optional[frozenset[str]]:
    """The columns a ``get_or_create()`` looks up (``defaults`` left out); None when not
    known (``**kwargs``, a positional ``Q``)."""
    if terminal(call) not in _MAKERS:
        return None
    cols = set()
    for arg in call.args:
        if arg.star or arg.keyword is None:
            return None
        name = arg.keyword.value
        if name in _NOT_LOOKUP:
            continue
        if "__" in name:
            return None
        cols.add(column(name))
    return frozenset(cols) or None


def settled(model: Optional[str], looked_up: frozenset[str], unique_keys: dict) -> bool:
    """Whether a unique key of ``model`` lies within the lookup (then the second insert fails
    and ``get_or_create()`` reads the winner's row)."""
    if model is None:
        return True             # the model is not known: its keys cannot be judged
    keys = list(unique_keys.get(model, [])) + [frozenset({"id"})]
    return any(frozenset(map(column, key)) <= looked_up for key in keys)


def message(model: str, verb: str, line: int, looked_up: frozenset[str]) -> str:
    cols = ", ".join(sorted(looked_up))
    return (f"{CODE} check-then-act: `{model}.objects.select_for_update().{verb}()` at line {line} "
            f"looks up ({cols}), which no unique key of `{model}` covers; a row lock cannot lock a "
            f"missing row, so two requests that both miss both insert; declare the unique key "
            f"(UniqueConstraint over the lookup) so the second insert fails and {verb}() reads the "
            f"winner's row")


def on_locked_read(fa: "FunctionState", event: LockedRead) -> None:
    """``select_for_update().get_or_create(...)`` whose lookup holds no unique key."""
    if event.in_loop or event.read.framework != "django":
        return
    looked_up = lookup(event.node)
    if looked_up is not None and not settled(event.read.model, looked_up, fa.mod.cfg.unique_keys):
        fa.report(event.node, CODE, message(event.read.model, terminal(event.node), event.line, looked_up),
                  assessment=severity.plain("a duplicate row the row lock cannot stop"))
