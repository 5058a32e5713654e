"""Fenced reads and writes for SQL stores: the storage half of a sound fencing recipe.

Why a write-only fence check is not enough: holder A (fence 5) reads a row,
passes ``ensure_held()`` and pauses; its lease ends; holder B (fence 6) reads
the row and computes.  A wakes up and writes: the row has only seen fences up
to 4, so ``WHERE lock_fence <= 5`` lets A's write through.  B then writes with
fence 6 from what it read *before* A's write, and A's update is lost.

The fix is to record the fence when reading too: B *claims* the row
(``UPDATE ... SET lock_fence = 6 WHERE lock_fence <= 6``) before it reads it, so
A's late write (5 < 6) is refused.  Then every write that gets through was
computed from a read no newer holder has overtaken:

1. :func:`claim_row` the row with ``lease.fence`` before reading it (then read it);
2. ``lease.ensure_held()``;
3. :func:`fenced_update` with the same fence.

Both raise :class:`FenceRejected` when a newer holder has claimed or written the
row: this holder's lease ended, and what it computed must not be written.  Each
statement is a single-row ``UPDATE``, atomic without a transaction around the
read-modify-write; the fence column is a ``BIGINT NOT NULL DEFAULT 0``.

The same rule holds for any store that can compare and set a number atomically
(a Redis hash with a script, a document with a conditional update): remember the
highest fence that read *or* wrote, and refuse both below it.
"""
from __future__ import annotations

import re
import sys
from typing import Any, Mapping, Sequence

from .errors import LockError

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?\Z")


class FenceRejected(LockError):
    """A newer lock holder has claimed or written the row: this holder's write is refused."""

    def __init__(self, table: str, fence: int, action: str) -> None:
        super().__init__(table, fence, action)
        self.table = table
        self.fence = fence
        self.action = action

    def __str__(self) -> str:
        return (f"txnsafety: refused to {self.action} a row of {self.table} with fence {self.fence}: "
                f"a newer lock holder has claimed or written it (this holder's lease ended; "
                f"nothing was written)")


def _ident(name: str) -> str:
    if not _IDENT.match(name):
        raise ValueError(f"txnsafety: {name!r} is not a plain SQL identifier")
    return name


def _placeholder(cursor: Any, paramstyle: str | None) -> str:
    """``?`` for qmark drivers (sqlite3), else ``%s`` (psycopg, Django, MySQL drivers)."""
    if paramstyle is None:
        module = sys.modules.get(type(cursor).__module__.split(".")[0])
        paramstyle = getattr(module, "paramstyle", "format")
    if paramstyle == "qmark":
        return "?"
    if paramstyle in ("format", "pyformat"):
        return "%s"
    raise ValueError(f"txnsafety: paramstyle {paramstyle!r} is not supported (qmark, format, pyformat)")


def _where(where: Mapping[str, Any], ph: str) -> tuple[str, list[Any]]:
    if not where:
        raise ValueError("txnsafety: a fenced statement needs a WHERE (the row's key)")
    return " AND ".join(f"{_ident(c)} = {ph}" for c in where), list(where.values())


def _rejected_or_missing(cursor: Any, table: str, where: Mapping[str, Any], ph: str, fence: int,
                         action: str) -> None:
    cond, params = _where(where, ph)
    cursor.execute(f"SELECT 1 FROM {table} WHERE {cond}", params)
    if cursor.fetchone() is not None:
        raise FenceRejected(table, fence, action)


def claim_row(cursor: Any, table: str, where: Mapping[str, Any], fence: int, *,
              columns: Sequence[str] = (), fence_column: str = "lock_fence",
              paramstyle: str | None = None) -> tuple[Any, ...] | None:
    """Record ``fence`` on the row before reading it; return ``columns`` of the row.

    ``UPDATE table SET fence_column = :fence WHERE <where> AND fence_column <= :fence``,
    then ``SELECT columns``.  Returns None when no row matches ``where`` (an
    empty tuple when ``columns`` is empty); raises :class:`FenceRejected` when a
    newer holder has claimed or written it.
    """
    table, fcol, ph = _ident(table), _ident(fence_column), _placeholder(cursor, paramstyle)
    cond, params = _where(where, ph)
    cursor.execute(f"UPDATE {table} SET {fcol} = {ph} WHERE {cond} AND {fcol} <= {ph}",
                   [fence, *params, fence])
    if cursor.rowcount == 0:
        _rejected_or_missing(cursor, table, where, ph, fence, "claim")
        return None
    if not columns:
        return ()
    cursor.execute(f"SELECT {', '.join(map(_ident, columns))} FROM {table} WHERE {cond}", params)
    return tuple(cursor.fetchone())


def fenced_update(cursor: Any, table: str, where: Mapping[str, Any], values: Mapping[str, Any],
                  fence: int, *, fence_column: str = "lock_fence", paramstyle: str | None = None) -> bool:
    """Write ``values`` only if no newer holder claimed or wrote the row; True if written.

    ``UPDATE table SET <values>, fence_column = :fence WHERE <where> AND
    fence_column <= :fence``.  Returns False when no row matches ``where``;
    raises :class:`FenceRejected` when a newer holder has claimed or written it.
    """
    table, fcol, ph = _ident(table), _ident(fence_column), _placeholder(cursor, paramstyle)
    cond, params = _where(where, ph)
    sets = ", ".join(f"{_ident(c)} = {ph}" for c in values)
    cursor.execute(f"UPDATE {table} SET {sets}, {fcol} = {ph} WHERE {cond} AND {fcol} <= {ph}",
                   [*values.values(), fence, *params, fence])
    if cursor.rowcount == 0:
        _rejected_or_missing(cursor, table, where, ph, fence, "write")
        return False
    return True
