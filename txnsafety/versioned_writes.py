"""TXN110 for ``@versioned`` models: a write that is not conditional on the version.

A model declared ``@versioned("version")`` promises optimistic writes: each one is
``UPDATE ... WHERE version = <read>`` and bumps it, so a concurrent change makes the
write fail instead of being erased.  An ORM's plain write (Django's ``save()``) is
never conditional: it writes whatever changed since the read.  Such a write is
TXN110 — unless the row was read in this request inside the same root transaction
as the write and that transaction prevents lost updates (its isolation, or a
``FOR UPDATE`` read), or the ORM's own write is conditional on the version field
(django-concurrency's fields).  A write of an instance this request never read
cannot stomp on anything it read: not judged here.

Integrations hand the facts (:class:`UnversionedWrite`); the judgement and the
report are here, one place for every integration.  SQLAlchemy needs none of this:
its ``version_id_col`` makes every flush conditional.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .checker import model_name, read_stamp
from .codes import Code
from .context import Transaction, current_scope
from .report import Violation, report
from .sites import user_site, user_trace


@dataclass(frozen=True)
class UnversionedWrite:
    """A plain (unconditional) write of an instance of a ``@versioned`` model."""

    model: type
    key: Any
    versioned_field: str
    transaction: Transaction | None
    #: the ORM's own write is conditional on the version (django-concurrency's version fields)
    conditional: bool = False
    #: what to use instead, named in the report
    remedy: str = "a write conditional on the version column"


def judge(instance: Any, write: UnversionedWrite) -> None:
    """Report TXN110 when ``write`` of ``instance`` can erase a concurrent change."""
    if write.conditional:
        return
    stamp = read_stamp(instance)
    if stamp is None:
        return
    read_txn, txn = stamp.transaction, write.transaction
    same_txn = read_txn is not None and txn is not None and read_txn.root_id == txn.root_id
    if same_txn and (txn.prevents_lost_update or stamp.for_update):
        return
    scope = current_scope()
    report(Violation(
        Code.TXN110, f"model is declared @versioned({write.versioned_field!r}) but this save() is not "
        f"conditional on the version: use {write.remedy}", model_name(write.model),
        None if write.key is None else str(write.key), read_site=stamp.site, write_site=user_site(1),
        trace=user_trace(2), request_id=scope.id if scope is not None else ""))
