"""The one taxonomy that the runtime checker and the linter share.

A code never changes meaning once published (DESIGN.md); new ones are appended.
Both halves import :data:`CODES` so a report from either names the same thing.
"""
from __future__ import annotations

import enum


class Code(str, enum.Enum):
    """A stomping class.  The value is the code users see and ``# noqa`` names."""

    kind: str
    summary: str

    def __new__(cls, value: str, kind: str, summary: str) -> "Code":
        member = str.__new__(cls, value)
        member._value_ = value
        member.kind = kind
        member.summary = summary
        return member

    def __str__(self) -> str:
        return self.value

    TXN101 = ("TXN101", "half-protected",
              "read outside any transaction or lock, written inside one")
    TXN102 = ("TXN102", "unprotected",
              "read-modify-write with no transaction or lock at all")
    TXN103 = ("TXN103", "internal",
              "two Python objects for the same key both written in one request")
    TXN104 = ("TXN104", "scope-changed",
              "read and written under different transactions or locks, or after the lock ended")
    TXN105 = ("TXN105", "check-then-act",
              "existence or limit check, then a write keyed on it, with nothing making the pair atomic")
    TXN106 = ("TXN106", "lost-update counter",
              "counter incremented in Python and written back instead of atomically in the database")
    TXN107 = ("TXN107", "retry side effect",
              "non-idempotent side effect inside a transaction that can be retried")
    TXN108 = ("TXN108", "lock outside transaction",
              "SELECT ... FOR UPDATE where no transaction holds the row lock")
    TXN109 = ("TXN109", "weak isolation",
              "read-modify-write in a transaction whose isolation does not prevent lost updates")
    TXN110 = ("TXN110", "policy",
              "write that the model's declared policy forbids")
    TXN111 = ("TXN111", "unverified lock",
              "write protected only by a lock the backend could not confirm (failed open)")
    TXN112 = ("TXN112", "stale lock read",
              "row re-read FOR UPDATE but the object kept its old values (identity map), then written")


CODES: dict[str, Code] = {c.value: c for c in Code}
