"""TXN107 retry side effect: an effect outside the database (an e-mail, an HTTP call, a
task queued on a broker) made inside a transaction that may run its body again or roll back.

A retrying transaction (``@retry_on_conflict``, a serializable retry loop) runs the effect
once per attempt; any transaction can roll back after the effect left. The walk finds the
call (its name matches ``side_effects`` in the settings, it is not a write, and it is not a
task that joins the transaction, ``delay_on_commit()``); the verdict is made here:

* inside a retrying transaction: always reported;
* inside a plain transaction: reported when ``side_effects_in_any_transaction`` is set
  (a rollback after an e-mail went out is a smaller harm than the same e-mail sent
  three times, so teams opt in to it).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..facts.model import Scope
from ..flow.events import SideEffect
from . import severity

if TYPE_CHECKING:
    from ..flow.state import FunctionState

CODE = "TXN107"


def fires(txn: Scope | None, in_any_transaction: bool) -> bool:
    """Whether a side effect made under ``txn`` (the innermost transaction) is reported."""
    return txn is not None and (txn.retrying or in_any_transaction)


def message(name: str, line: int, txn: Scope) -> str:
    why = ("can be retried, so it may run several times" if txn.retrying
           else "can roll back after it ran")
    return (f"{CODE} retry side effect: `{name}()` at line {line} runs inside "
            f"`{txn.label}` (line {txn.line}), which {why}; move it after the transaction, "
            f"into transaction.on_commit(), or make it a transactional task")


def on_side_effect(fa: "FunctionState", event: SideEffect) -> None:
    """The verdict on a side effect the walk met (subscribed to ``SIDE_EFFECT``)."""
    txn = event.transaction
    if fires(txn, fa.mod.cfg.side_effects_in_any_transaction):
        fa.report(event.node, CODE, message(event.name, event.line, txn),
                  assessment=severity.plain("an effect outside the database, repeated or not undone"))
