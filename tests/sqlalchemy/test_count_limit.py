"""TXN105 at run time on SQLAlchemy: a count compared with a limit, then an insert.

``session.scalar(select(func.count()).select_from(Ticket).where(...)) < gig.capacity``
(or the legacy ``Query.count()``), then ``session.add(Ticket(...))``: two requests can
both count under the capacity and both insert.  Reported on SQLite and PostgreSQL,
sync and async; a count only shown or asserted is no check; the parent row locked
``with_for_update()`` first, or a serializable transaction, makes it silent; the
tickets' unique key (gig, number) does not.  Two real concurrent Sessions on PostgreSQL
overbook the gig, then the parent-row lock keeps them to its capacity.
"""
from __future__ import annotations

import asyncio
import os
import threading

import pytest
from sqlalchemy import Column, ForeignKey, Integer, UniqueConstraint, func, select, text
from sqlalchemy.orm import sessionmaker

import txnsafety
from fixtures.sqla_app.engines import async_stack, sync_stack
from fixtures.sqla_app.models import Base
from txnsafety.sqlalchemy import instrument

from .conftest import is_pg

HERE = os.path.abspath(__file__)


@txnsafety.written_in_transaction()
class Gig(Base):
    __tablename__ = "txn105_limit_gig"
    id = Column(Integer, primary_key=True, autoincrement=False)
    capacity = Column(Integer, nullable=False)


@txnsafety.written_in_transaction()
class Ticket(Base):
    """One ticket per (gig, number): a unique key that cannot bound how many tickets a gig has."""

    __tablename__ = "txn105_limit_ticket"
    __table_args__ = (UniqueConstraint("gig_id", "number"),)
    id = Column(Integer, primary_key=True, autoincrement=False)
    gig_id = Column(Integer, ForeignKey("txn105_limit_gig.id"), nullable=False)
    number = Column(Integer, nullable=False)


@pytest.fixture
def stack(fresh_db):
    """A gig of capacity 2 with one ticket sold."""
    s = sync_stack(fresh_db)
    with s.plain.begin() as conn:
        for table in (Gig.__table__, Ticket.__table__):
            table.create(conn, checkfirst=True)
        conn.execute(Ticket.__table__.delete())
        conn.execute(Gig.__table__.delete())
        conn.execute(Gig.__table__.insert().values(id=1, capacity=2))
        conn.execute(Ticket.__table__.insert().values(id=1, gig_id=1, number=1))
    yield s
    s.dispose()


def _sold(session, gig):
    return session.scalar(select(func.count()).select_from(Ticket).where(Ticket.gig_id == gig.id))


def _sell(session, number):
    """The racy sale: count, compare with the capacity, insert."""
    gig = session.get(Gig, 1)
    if _sold(session, gig) < gig.capacity:                                       # the check
        session.add(Ticket(id=number, gig_id=gig.id, number=number))              # the act
        session.commit()


def _sell_by_query_count(session, number):
    gig = session.get(Gig, 1)
    sold = session.query(Ticket).filter(Ticket.gig_id == gig.id).count()
    if sold >= gig.capacity:
        raise ValueError("sold out")
    session.add(Ticket(id=number, gig_id=gig.id, number=number))
    session.commit()


@pytest.mark.parametrize("sell", [_sell, _sell_by_query_count])
def test_a_count_under_a_limit_then_an_insert_is_reported(stack, sell, txnsafety_violations):
    with txnsafety.request_scope("POST /sell/"), stack.Auto() as session:
        sell(session, 2)
    (violation,) = txnsafety_violations
    assert violation.code.value == "TXN105" and violation.model.endswith("Ticket")
    assert violation.detail == {"keys": "gig_id", "check": "count() under a limit"}
    assert violation.read_site.file == HERE
    assert violation.read_site.function == ("_sold" if sell is _sell else "_sell_by_query_count")
    assert violation.write_site.file == HERE and violation.write_site.function == sell.__name__
    assert "unique constraint cannot bound a count" in violation.message


def test_a_count_shown_or_asserted_is_no_check(stack, txnsafety_violations):
    with txnsafety.request_scope("GET /gig/"), stack.Auto() as session:
        gig = session.get(Gig, 1)
        shown = f"{_sold(session, gig)} sold"
        assert session.query(Ticket).filter(Ticket.gig_id == gig.id).count() == 1
        session.add(Ticket(id=2, gig_id=gig.id, number=2))
        session.commit()
    assert shown == "1 sold" and txnsafety_violations == []


def test_async_count_under_a_limit_is_reported(fresh_db, stack, txnsafety_violations):
    async def sell(session):
        gig = await session.get(Gig, 1)
        sold = await session.scalar(select(func.count()).select_from(Ticket).where(Ticket.gig_id == gig.id))
        if sold < gig.capacity:
            session.add(Ticket(id=2, gig_id=gig.id, number=2))
            await session.commit()

    async def main():
        astack = async_stack(fresh_db)
        try:
            with txnsafety.request_scope("POST /sell/"):
                async with astack.Auto() as session:
                    await sell(session)
        finally:
            await astack.dispose()

    asyncio.run(main())
    (violation,) = txnsafety_violations
    assert violation.code.value == "TXN105" and violation.detail["check"] == "count() under a limit"
    assert violation.read_site.file == HERE and violation.read_site.function == "sell"


def test_the_parent_row_locked_first_or_a_serializable_transaction_makes_it_atomic(stack, txnsafety_violations):
    if is_pg(stack.url):
        with txnsafety.request_scope("POST /sell/"), stack.Weak() as session:      # READ COMMITTED
            gig = session.scalars(select(Gig).where(Gig.id == 1).with_for_update()).one()
            if _sold(session, gig) < gig.capacity:
                session.add(Ticket(id=2, gig_id=gig.id, number=2))
                session.commit()
        Serializable = instrument(sessionmaker(stack.main.execution_options(isolation_level="SERIALIZABLE")))
    else:
        Serializable = stack.Main                                   # SQLite's real transactions
    assert txnsafety_violations == []
    with txnsafety.request_scope("POST /sell/"), Serializable() as session:
        gig = session.get(Gig, 1)
        if _sold(session, gig) < gig.capacity + 1:
            session.add(Ticket(id=3, gig_id=gig.id, number=3))
            session.commit()
    assert txnsafety_violations == []
    with stack.Auto() as session:
        assert _sold(session, session.get(Gig, 1)) == (3 if is_pg(stack.url) else 2)


# -- two real requests at once, on PostgreSQL ----------------------------------------------------

def test_two_sessions_both_count_under_the_limit_and_overbook(stack, txnsafety_violations):
    if not is_pg(stack.url):
        pytest.skip("SQLite runs one writer at a time; PostgreSQL shows two requests at once")
    barrier = threading.Barrier(2)

    def request(number: int) -> None:
        with txnsafety.request_scope("POST /sell/"), stack.Weak() as session:
            gig = session.get(Gig, 1)
            under = _sold(session, gig) < gig.capacity
            barrier.wait()                                          # both counted 1 of 2
            if under:
                session.add(Ticket(id=number, gig_id=gig.id, number=number))
                session.commit()

    threads = [threading.Thread(target=request, args=(n,)) for n in (2, 3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with stack.Auto() as session:
        assert _sold(session, session.get(Gig, 1)) == 3             # capacity 2: overbooked
    assert txnsafety_violations.codes() == ["TXN105", "TXN105"]


def test_the_parent_row_lock_keeps_two_sessions_to_the_capacity(stack, txnsafety_violations):
    if not is_pg(stack.url):
        pytest.skip("SQLite runs one writer at a time; PostgreSQL shows two requests at once")
    counted, pid_known = threading.Event(), threading.Event()
    pids: dict[str, int] = {}
    sold: dict[int, bool] = {}

    def waiting_for_a_lock(monitor) -> bool:
        return monitor.execute(text("SELECT wait_event_type FROM pg_stat_activity WHERE pid = :pid"),
                               {"pid": pids["second"]}).scalar() == "Lock"

    def request(number: int) -> None:
        with txnsafety.request_scope("POST /sell/"), stack.Weak() as session:
            if number == 3:
                pids["second"] = session.connection().exec_driver_sql("SELECT pg_backend_pid()").scalar()
                pid_known.set()
                counted.wait()
            gig = session.scalars(select(Gig).where(Gig.id == 1).with_for_update()).one()
            under = _sold(session, gig) < gig.capacity
            if number == 2:
                counted.set()
                with stack.auto.connect() as monitor:   # autocommit: a fresh pg_stat_activity each time
                    while not waiting_for_a_lock(monitor):  # the other one is at the lock
                        pass
            if under:
                session.add(Ticket(id=number, gig_id=gig.id, number=number))
            session.commit()
            sold[number] = under

    second = threading.Thread(target=request, args=(3,))
    second.start()
    pid_known.wait()
    first = threading.Thread(target=request, args=(2,))
    first.start()
    first.join()
    second.join()
    assert sold == {2: True, 3: False}
    with stack.Auto() as session:
        assert _sold(session, session.get(Gig, 1)) == 2
    assert txnsafety_violations == []


# -- SQLite's legacy transaction mode: the SELECTs run outside any transaction -------------------

def _sell_locked(session, number):
    gig = session.get(Gig, 1, with_for_update=True)          # SQLite renders no FOR UPDATE
    if _sold(session, gig) < gig.capacity:
        session.add(Ticket(id=number, gig_id=gig.id, number=number))
        session.commit()


@pytest.mark.parametrize("joined", [False, True], ids=["own-session", "joined-outer-transaction"])
def test_sqlite_legacy_mode_get_for_update_count_then_insert_is_reported(stack, joined, txnsafety_violations):
    """pysqlite's default mode sends no BEGIN before the first write and SQLite renders no FOR
    UPDATE: the count runs outside any transaction of the request's, and two requests can both
    count under the capacity.  Also when the Session joins an outer transaction the driver began
    for an earlier write (the test-suite recipe: fixtures written on the connection, the request's
    Session bound to it with savepoints): the connection is in a transaction then, but not one the
    request's code begins in production."""
    if is_pg(stack.url):
        pytest.skip("SQLite's legacy driver mode")
    if not joined:
        with txnsafety.request_scope("POST /sell/"), stack.Weak() as session:    # pysqlite's default
            _sell_locked(session, 2)
    else:
        with stack.weak.connect() as conn:
            outer = conn.begin()
            conn.execute(Ticket.__table__.insert().values(id=9, gig_id=1, number=9))    # a fixture's write
            conn.execute(Ticket.__table__.delete().where(Ticket.id == 9))
            assert conn.connection.dbapi_connection.in_transaction     # the driver's implicit BEGIN
            Joined = instrument(sessionmaker(bind=conn, join_transaction_mode="create_savepoint"))
            with txnsafety.request_scope("POST /sell/"), Joined() as session:
                _sell_locked(session, 2)
            outer.rollback()
    (violation,) = txnsafety_violations.of("TXN105")
    assert violation.detail == {"keys": "gig_id", "check": "count() under a limit"}
    assert violation.read_site.function == "_sold" and violation.write_site.function == "_sell_locked"


def test_sqlite_real_transactions_joined_by_a_session_keep_the_pair_atomic(stack, txnsafety_violations):
    """The control: the same outer transaction on the engine with ``sqlite_transactions()`` (a real
    BEGIN, driver autocommit) serializes the count and the insert."""
    if is_pg(stack.url):
        pytest.skip("SQLite's transaction modes")
    with stack.main.connect() as conn:
        outer = conn.begin()
        Joined = instrument(sessionmaker(bind=conn, join_transaction_mode="create_savepoint"))
        with txnsafety.request_scope("POST /sell/"), Joined() as session:
            _sell_locked(session, 2)
        outer.rollback()
    assert txnsafety_violations == []
