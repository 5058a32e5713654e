"""TXN108 lock outside transaction: ``select_for_update()`` evaluated where no transaction
holds the row lock (Django's autocommit releases it with the statement).

The rule reports the locking read and defers the finding to the
function's callers (``project/call_joins.CallJoins``): a function every caller of which
runs it inside a transaction is fine.  What is left is settled here:

* the function uses the lock itself (it writes after the locking read, or calls a method of
  a locked row): the lock protects nothing, ``Confidence.HIGH``;
* it only takes the lock for its caller (``refresh_for_update()`` copies the locked row
  into ``self``, a loader returns it) and the project shows a caller outside a transaction:
  that caller's lock protects nothing, ``HIGH``;
* it only takes the lock for its caller and the project shows no caller at all (a public
  helper of a library, called from outside it): whether a transaction is held depends on
  code the project cannot show, ``Confidence.LOW``;
* no path of calls the project shows reaches it from an entry point without a transaction,
  but it cannot show them all (a model method, called as ``row.method()`` across the code
  base): ``LOW`` too.  On Django such a
  call outside a transaction raises ``TransactionManagementError``, so a path no caller
  shows is one no test has run.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ..facts.model import Confidence, Finding, Need
from ..flow.events import LockedRead
from . import severity

if TYPE_CHECKING:
    from ..flow.state import FunctionState

CODE = "TXN108"


def message(line: int, loop: bool = False) -> str:
    if loop:
        return (f"{CODE} lock outside transaction: select_for_update() evaluated at line "
                f"{line} outside any transaction, so the row locks end at once; wrap the loop "
                f"in transaction.atomic()")
    return (f"{CODE} lock outside transaction: select_for_update() evaluated at line {line} "
            f"outside any transaction, so the row lock ends with the statement (Django raises "
            f"TransactionManagementError in autocommit); wrap the read and the write in "
            f"transaction.atomic()")


def for_caller(lock_line: int, uses: list[int]) -> bool:
    """Whether the function takes the lock only for its caller: nothing after the locking
    read writes or calls a method of a row (``uses``: the lines that do)."""
    return not any(line >= lock_line for line in uses)


def settle(finding: Finding, uses: list[int], called: bool, seen_protected: bool = False) -> Finding:
    """The deferred TXN108 ``finding`` of a function whose callers did not all protect it.

    ``seen_protected``: no path of calls the project shows reaches it from an entry point
    without a transaction, so only calls it cannot see (a model method's callers across the
    code base) may hold none: ``LOW``."""
    if finding.code != CODE:
        return finding
    if called and seen_protected:
        return dataclasses.replace(finding, confidence=Confidence.LOW)
    if called or not for_caller(finding.line, uses):
        return finding
    return dataclasses.replace(finding, confidence=Confidence.LOW)


def on_locked_read(fa: "FunctionState", event: LockedRead) -> None:
    """A Django ``select_for_update()`` evaluated with no transaction held here: reported,
    and deferred to the callers (``settle``) when the function has some.  A get through a
    lock of the project's own (``fetch_under_lock``) is not a row lock's only holder."""
    if event.transaction is None and event.read.framework == "django" and \
            (event.in_loop or not event.read.locked):
        fa.report(event.node, CODE, deferrable=True, need=Need.TXN, settle=settle,
                  assessment=severity.plain("the row lock protects nothing"),
                  message=message(event.line, loop=event.in_loop))
