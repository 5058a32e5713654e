from __future__ import annotations

from dataclasses import dataclass

import pytest

import txnsafety
from fixtures.minidb import Entity, Store


@txnsafety.written_in_transaction()
@dataclass(eq=False)
class Account(Entity):
    balance: int = 0


@txnsafety.written_with_user_lock(lambda p: p.user_id)
@dataclass(eq=False)
class Points(Entity):
    user_id: int = 0
    points: int = 0


@txnsafety.never_written()
@dataclass(eq=False)
class Country(Entity):
    name: str = ""


@txnsafety.written_once()
@dataclass(eq=False)
class AuditEntry(Entity):
    text: str = ""


@txnsafety.written_by_single_writer("nightly")
@dataclass(eq=False)
class DailyStat(Entity):
    total: int = 0


@txnsafety.dangerously_written_outside_transaction(reason="legacy counters, fixed in #12")
@dataclass(eq=False)
class LegacyCounter(Entity):
    n: int = 0


@txnsafety.versioned("version")
@dataclass(eq=False)
class Doc(Entity):
    version: int = 0


@dataclass(eq=False)
class Unchecked(Entity):
    n: int = 0


MODELS = (Account, Points, Country, AuditEntry, DailyStat, LegacyCounter, Doc, Unchecked)


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "t.sqlite3"))
    s.create(*MODELS)
    with txnsafety.suppress(reason="test data setup"):
        s.insert(Account(1, 100))
        s.insert(Points(1, user_id=7, points=0))
        s.conn.execute("INSERT INTO country VALUES (1, 'NZ')")
        s.insert(AuditEntry(1, "created"))
        s.insert(DailyStat(1, 0))
        s.insert(LegacyCounter(1, 0))
        s.insert(Doc(1, 0))
        s.insert(Unchecked(1, 0))
    yield s
    s.close()
