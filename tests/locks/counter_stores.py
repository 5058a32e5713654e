"""A counter in a transaction-less store, read and written with a lock's fence.

Two stores, one interface (``read(fence, claim)``, ``write(fence, value)``, ``value()``):
the :class:`~tests.locks.fenced_store.FencedStore` file, and a PostgreSQL row in
autocommit mode (each statement its own transaction, nothing spanning the
read-modify-write) through :func:`txnsafety.locks.claim_row` /
:func:`txnsafety.locks.fenced_update`.  ``claim=False`` is the write-only
fencing that loses updates; ``claim=True`` the documented recipe.
"""
from __future__ import annotations

from typing import Any

import psycopg

from tests.locks.fenced_store import FencedStore
from txnsafety.locks import FenceRejected, claim_row, fenced_update


class FileCounter:
    def __init__(self, path: str) -> None:
        self.store = FencedStore(path)

    def read(self, fence: int, claim: bool) -> int:
        if claim:
            ok, value = self.store.claim(fence)
            if not ok:
                raise FenceRejected(self.store.path, fence, "claim")
            return value or 0
        try:
            return self.store.read()["value"] or 0
        except FileNotFoundError:
            return 0

    def write(self, fence: int, value: int, op: str | None = None) -> bool:
        return self.store.write(fence, value, op)

    def value(self) -> int:
        return self.store.read()["value"] or 0


class PostgresCounter:
    """Row ``id = 1`` of ``table`` (value BIGINT, lock_fence BIGINT)."""

    def __init__(self, url: str, table: str) -> None:
        self.conn = psycopg.connect(url, autocommit=True)
        self.table = table

    @classmethod
    def create(cls, url: str, table: str) -> "PostgresCounter":
        store = cls(url, table)
        store.conn.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY, value BIGINT NOT NULL, "
                           f"lock_fence BIGINT NOT NULL DEFAULT 0)")
        store.conn.execute(f"INSERT INTO {table} (id, value) VALUES (1, 0)")
        return store

    def read(self, fence: int, claim: bool) -> int:
        cur = self.conn.cursor()
        if claim:
            row = claim_row(cur, self.table, {"id": 1}, fence, columns=["value"])
            assert row is not None
            return row[0]
        return cur.execute(f"SELECT value FROM {self.table} WHERE id = 1").fetchone()[0]

    def write(self, fence: int, value: int, op: str | None = None) -> bool:
        try:
            return fenced_update(self.conn.cursor(), self.table, {"id": 1}, {"value": value}, fence)
        except FenceRejected:
            return False

    def value(self) -> int:
        return self.conn.execute(f"SELECT value FROM {self.table} WHERE id = 1").fetchone()[0]

    def drop(self) -> None:
        self.conn.execute(f"DROP TABLE IF EXISTS {self.table}")
        self.conn.close()


def open_store(spec: str) -> Any:
    if spec.startswith("postgresql://"):
        url, _, table = spec.partition("#")
        return PostgresCounter(url, table)
    return FileCounter(spec)
