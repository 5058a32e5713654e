"""The common flushed UPDATE is judged on a path of its own (``txnsafety/sqlalchemy/updates.py``),
in two Python frames; every write must be judged by it exactly as by the full steps.

Each scenario runs as production runs (no read located until its model had a violation: the
pytest plugin locates every read, which takes the full path), twice, each time in a request of
its own on rows put back: with the quick path, and with it answering "not the common case" for
every write (the full steps then judge them all).  Both must report the same violations with
the same fields written and leave the same rows; the scenarios marked quick must be judged
without the full steps at all (else this file would compare the full path with itself).
"""
from __future__ import annotations

from typing import Any, Callable

import pytest
from sqlalchemy import Column, Integer, select

import txnsafety
from fixtures.sqla_app.models import Account, Base, LockedCounter, Tally, VersionedCounter
from tests._production_mode import production_read_sites
from txnsafety.sites import sites_wanted
from txnsafety.sqlalchemy import updates

from .conftest import is_pg, reset_rows


@txnsafety.written_in_transaction()
class Shelf(Base):
    """``shelf_rank`` is only ever assigned blind in this process (txnsafety.provenance), ``shelf_hits``
    from itself."""
    __tablename__ = "txn_quick_shelf"
    id = Column(Integer, primary_key=True, autoincrement=False)
    shelf_rank = Column(Integer, nullable=False, default=0)
    shelf_hits = Column(Integer, nullable=False, default=0)


@txnsafety.written_once()
class Receipt(Base):
    """A policy the read's transaction does not clear: a re-write is TXN110 in any transaction."""
    __tablename__ = "txn_quick_receipt"
    id = Column(Integer, primary_key=True, autoincrement=False)
    n = Column(Integer, nullable=False, default=0)


@txnsafety.written_by_single_writer("nightly")
class Ledger(Base):
    """Another: written only inside ``txnsafety.single_writer("nightly")``."""
    __tablename__ = "txn_quick_ledger"
    id = Column(Integer, primary_key=True, autoincrement=False)
    n = Column(Integer, nullable=False, default=0)


#: the tables of this file's models, and their rows
_OWN_ROWS = ((Shelf, {"id": 1, "shelf_rank": 1, "shelf_hits": 10}), (Receipt, {"id": 1, "n": 0}),
             (Ledger, {"id": 1, "n": 0}))


# -- the scenarios: each is one request's code -----------------------------------------------------

def _increment(maker: str) -> Callable[[Any], None]:
    def scenario(stack: Any) -> None:
        with getattr(stack, maker)() as session:
            account = session.get(Account, 1)
            account.balance += 1
            session.commit()
    return scenario


def _owner(new: Callable[[str], str], also_balance: bool = False) -> Callable[[Any], None]:
    def scenario(stack: Any) -> None:
        with stack.Auto() as session:                    # no transaction: a derived value is TXN102
            account = session.get(Account, 1)
            account.owner = new(account.owner)
            if also_balance:
                account.balance += 1
            session.commit()
    return scenario


def _set_back(stack: Any) -> None:
    with stack.Weak() as session:
        account = session.get(Account, 1)
        account.balance += 1
        account.balance -= 1                             # the flush sends nothing
        session.commit()


def _shelf(hits: bool) -> Callable[[Any], None]:
    def scenario(stack: Any) -> None:
        with stack.Auto() as session:                    # no transaction: a derived number is TXN102
            shelf = session.get(Shelf, 1)
            shelf.shelf_rank = 7                         # a position from the request: blind
            if hits:
                shelf.shelf_hits += 1
            session.commit()
    return scenario


def _counted(model: type) -> Callable[[Any], None]:
    def scenario(stack: Any) -> None:
        with stack.Main() as session:                    # a transaction that prevents lost updates
            row = session.get(model, 1)
            row.n += 1
            session.commit()
    return scenario


def _written_twice(stack: Any) -> None:
    with stack.Main() as session:
        account = session.get(Account, 1)
        account.balance += 1
        session.flush()                                  # the row's second write finds the first
        account.balance += 1
        session.commit()


def _two_objects_of_a_row(model: type, column: str, maker: str) -> Callable[[Any], None]:
    def scenario(stack: Any) -> None:
        with getattr(stack, maker)() as outer, getattr(stack, maker)() as inner:
            mine = outer.get(model, 1)
            theirs = inner.get(model, 1)
            setattr(theirs, column, getattr(theirs, column) + 5)
            inner.commit()
            setattr(mine, column, getattr(mine, column) + 10)  # erases the +5 (TXN103)
            outer.commit()
    return scenario


def _read_in_an_earlier_request(stack: Any) -> None:
    session = stack.Main(expire_on_commit=False)
    try:
        with txnsafety.request_scope("the earlier request"):
            account = session.get(Account, 1)
            session.commit()
        account.balance += 1                             # this request's write of that read
        session.commit()
    finally:
        session.close()


def _stale_lock(stack: Any) -> None:
    with stack.Main(expire_on_commit=False) as session:
        account = session.get(Account, 1)
        session.commit()
        session.execute(select(Account).with_for_update()).scalar_one()  # an identity-map hit
        account.balance += 1
        session.commit()


def _lock_in_the_same_snapshot(stack: Any) -> None:
    with stack.Main() as session:
        account = session.get(Account, 1)
        session.get(Account, 1, with_for_update=True)
        account.balance += 1
        session.commit()


def _for_update_in_a_weak_transaction(stack: Any) -> None:
    with stack.Weak() as session:
        account = session.scalars(select(Account).where(Account.id == 1).with_for_update()).one()
        account.balance += 1
        session.commit()


def _versioned(stack: Any) -> None:
    with stack.Auto() as session:
        counter = session.get(VersionedCounter, 1)
        counter.n += 1
        session.commit()


def _atomic(stack: Any) -> None:
    with stack.Auto() as session:
        account = session.get(Account, 1)
        account.balance = Account.balance + 1          # computed by the database
        session.commit()


#: name -> (the request's code, whether the quick path judges every write of it by itself: not a
#: SQL expression, nor a read of another request, nor a write of a model whose reads are located
#: since a violation earlier in the request, as in "two objects of a row, weak", nor one whose
#: policy the read's transaction does not clear)
SCENARIOS: dict[str, tuple[Callable[[Any], None], bool]] = {
    "increment, transaction that prevents lost updates": (_increment("Main"), True),
    "increment, weak transaction": (_increment("Weak"), True),
    "increment, no transaction": (_increment("Auto"), True),
    "blind text": (_owner(lambda old: "a name typed in a form"), True),
    "appended text": (_owner(lambda old: old + " & bob"), True),
    "blind text and a number": (_owner(lambda old: "zed", also_balance=True), True),
    "set back to the loaded value": (_set_back, True),
    "a number written blind": (_shelf(hits=False), True),
    "a blind number and a counter": (_shelf(hits=True), True),
    "a row written twice": (_written_twice, True),
    "two objects of a row, weak": (_two_objects_of_a_row(Account, "balance", "Weak"), False),
    "two objects of a row, legacy policy": (_two_objects_of_a_row(Tally, "n", "Auto"), True),
    "stale lock": (_stale_lock, True),
    "lock in the same snapshot": (_lock_in_the_same_snapshot, True),
    "FOR UPDATE in a weak transaction": (_for_update_in_a_weak_transaction, True),
    "version column": (_versioned, True),
    "SQL expression": (_atomic, False),
    "user lock policy, no lock": (_counted(LockedCounter), False),
    "written once, re-written": (_counted(Receipt), False),
    "single writer, outside its block": (_counted(Ledger), False),
    "read in an earlier request": (_read_in_an_earlier_request, False),
}


# -- running them -------------------------------------------------------------------------------------

@pytest.fixture
def production():
    """Reads located only once their model had a violation, as ``txnsafety.configure()``'s default."""
    with production_read_sites():
        yield


def _served(stack: Any, scenario: Callable[[Any], None], log: list[Any], quick: bool,
            monkeypatch: pytest.MonkeyPatch) -> tuple[list[tuple[Any, ...]], int, tuple[Any, ...]]:
    """(the violations reported, the full judgements made, the rows left) of one run."""
    reset_rows(stack.url)
    with stack.plain.begin() as conn:
        for model, row in _OWN_ROWS:
            conn.execute(model.__table__.insert(), [row])
    sites_wanted.clear()  # (a violation of the other run located this model's reads since)
    full = []
    judge_update = updates.judge_update
    monkeypatch.setattr(updates, "judge_update", lambda state, scope: full.append(1) or judge_update(state, scope))
    if not quick:
        monkeypatch.setattr(updates, "_judged_quickly", lambda state, scope: False)
    seen = len(log)
    try:
        with txnsafety.request_scope("a request"):
            scenario(stack)
    finally:
        monkeypatch.undo()
    with stack.plain.connect() as conn:
        rows = tuple(conn.execute(select(model)).all()
                     for model in (Account, Tally, VersionedCounter, LockedCounter) + tuple(m for m, _ in _OWN_ROWS))
    return [(v.code.value, v.model, v.key, v.detail.get("fields written")) for v in log[seen:]], len(full), rows


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_quick_path_judges_as_the_full_steps_do(stack, name, production, txnsafety_violations, monkeypatch):
    scenario, quick_alone = SCENARIOS[name]
    quick = _served(stack, scenario, txnsafety_violations, True, monkeypatch)
    full = _served(stack, scenario, txnsafety_violations, False, monkeypatch)
    assert quick[0] == full[0]
    assert quick[2] == full[2]
    assert full[1] > 0  # the full steps judged every write
    if quick_alone:
        assert quick[1] == 0


def test_the_scenarios_report_what_they_are_about(stack, production, txnsafety_violations, monkeypatch):
    """Not all quiet: the comparison above is between paths that report."""
    codes = {name: [v[0] for v in _served(stack, scenario, txnsafety_violations, True, monkeypatch)[0]]
             for name, (scenario, _) in SCENARIOS.items()}
    assert codes["increment, transaction that prevents lost updates"] == []
    assert codes["increment, weak transaction"] == ["TXN109"]
    assert codes["increment, no transaction"] == ["TXN102"]
    assert codes["blind text"] == []
    assert codes["appended text"] == ["TXN102"]
    assert codes["a number written blind"] == []
    assert codes["a blind number and a counter"] == ["TXN102"]
    assert codes["two objects of a row, weak"] == ["TXN109", "TXN109", "TXN103"]
    assert codes["two objects of a row, legacy policy"] == ["TXN103"]
    assert codes["stale lock"] == (["TXN104", "TXN112"] if is_pg(stack.url) else ["TXN104"])
    assert codes["lock in the same snapshot"] == []
    assert codes["version column"] == []
    assert codes["SQL expression"] == []
    assert codes["read in an earlier request"] != []
    assert codes["user lock policy, no lock"] == ["TXN102"]
    assert codes["written once, re-written"] == ["TXN110"]
    assert codes["single writer, outside its block"] == ["TXN110"]


@pytest.fixture
def stack(fresh_db):
    from fixtures.sqla_app.engines import sync_stack
    s = sync_stack(fresh_db)
    with s.plain.begin() as conn:
        for model, _ in _OWN_ROWS:
            model.__table__.create(conn, checkfirst=True)
    yield s
    s.dispose()
