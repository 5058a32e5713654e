"""TXN105 at run time on SQLAlchemy: an empty lookup, then an insert keyed on the same values.

Reported on SQLite and PostgreSQL for every kind of check (``first()``,
``scalar_one_or_none()``, ``exists()``, ``count()``), in no transaction or in one that
does not serialize the pair; not reported when a unique key covers the lookup's keys,
a lock is held across both, the transaction is serializable, or a row lock was taken
first.  Two real concurrent Sessions show the duplicate being made.
"""
from __future__ import annotations

import asyncio
import os
import threading

import pytest
from sqlalchemy import Column, Integer, String, UniqueConstraint, exists, func, select
from sqlalchemy.exc import IntegrityError

import txnsafety
from fixtures.sqla_app.engines import async_stack, sync_stack
from fixtures.sqla_app.models import Base, Counter

from .conftest import is_pg

HERE = os.path.abspath(__file__)


@txnsafety.written_in_transaction()
class Member(Base):
    """No unique key on ``email``: a check-then-insert on it can make duplicates."""

    __tablename__ = "txn105_member"
    id = Column(Integer, primary_key=True, autoincrement=False)
    email = Column(String(100), nullable=False)


@txnsafety.written_in_transaction()
class Claim(Base):
    """One claim per (voucher, user): the database rejects the second."""

    __tablename__ = "txn105_claim"
    __table_args__ = (UniqueConstraint("voucher", "user_id"),)
    id = Column(Integer, primary_key=True, autoincrement=False)
    voucher = Column(String(20), nullable=False)
    user_id = Column(Integer, nullable=False)


@pytest.fixture
def stack(fresh_db):
    s = sync_stack(fresh_db)
    with s.plain.begin() as conn:
        for table in (Member.__table__, Claim.__table__):
            table.create(conn, checkfirst=True)
            conn.execute(table.delete())
    yield s
    s.dispose()


def _check(session, how, email="zed@example.org"):
    if how == "first":
        return session.scalars(select(Member).where(Member.email == email)).first() is not None
    if how == "scalar_one_or_none":
        return session.execute(select(Member).filter_by(email=email)).scalar_one_or_none() is not None
    if how == "query":
        return session.query(Member).filter(Member.email == email).first() is not None
    if how == "exists":
        return session.scalar(select(exists().where(Member.email == email)))
    return session.scalar(select(func.count()).select_from(Member).where(Member.email == email)) >= 1


@pytest.mark.parametrize("how", ["first", "scalar_one_or_none", "query", "exists", "count"])
def test_check_then_insert_is_reported_with_both_sites(stack, how, txnsafety_violations):
    with stack.Auto() as session:                                  # no transaction
        if not _check(session, how):
            session.add(Member(id=1, email="zed@example.org"))
            session.commit()
    (violation,) = txnsafety_violations
    assert violation.code.value == "TXN105"
    assert violation.model.endswith("Member") and violation.detail["keys"] == "email"
    assert violation.read_site.file == HERE and violation.read_site.function == "_check"
    assert violation.write_site.file == HERE


def test_read_committed_transaction_does_not_make_it_atomic(stack, txnsafety_violations):
    with stack.Weak() as session:
        if not _check(session, "first"):
            session.add(Member(id=1, email="zed@example.org"))
            session.commit()
    assert txnsafety_violations.codes() == ["TXN105"]


def test_main_transaction_is_atomic_only_where_it_is_serializable(stack, txnsafety_violations):
    with stack.Main() as session:               # SQLite: serializable; PostgreSQL: REPEATABLE READ
        if not _check(session, "first"):
            session.add(Member(id=1, email="zed@example.org"))
            session.commit()
    assert txnsafety_violations.codes() == (["TXN105"] if is_pg(stack.url) else [])


def test_a_count_of_some_rows_is_not_a_check(stack, txnsafety_violations):
    with stack.Auto() as session:
        session.add(Member(id=1, email="zed@example.org"))
        session.commit()
        assert _check(session, "count")                            # one row: shown or asserted, not known
        session.add(Member(id=2, email="zed@example.org"))
        session.commit()
    assert txnsafety_violations == []


def test_another_key_is_not_the_act(stack, txnsafety_violations):
    with stack.Auto() as session:
        if not _check(session, "first"):
            session.add(Member(id=1, email="someone@example.org"))
            session.commit()
    assert txnsafety_violations == []


def test_unique_constraint_covering_the_keys_makes_it_atomic(stack, txnsafety_violations):
    with stack.Auto() as session:
        claimed = session.scalars(select(Claim).where(Claim.voucher == "V1", Claim.user_id == 7)).first()
        if claimed is None:
            session.add(Claim(id=1, voucher="V1", user_id=7))
            session.commit()
    assert txnsafety_violations == []
    with stack.Auto() as session:                                  # the key covers more than the check
        if session.scalars(select(Claim).where(Claim.voucher == "V2")).first() is None:
            session.add(Claim(id=2, voucher="V2", user_id=8))
            session.commit()
    assert txnsafety_violations.codes() == ["TXN105"]


def test_a_lock_held_across_both_makes_it_atomic(stack, txnsafety_violations):
    from txnsafety.locks import user_write_lock
    with user_write_lock("member:zed"), stack.Auto() as session:
        if not _check(session, "first"):
            session.add(Member(id=1, email="zed@example.org"))
            session.commit()
    assert txnsafety_violations == []


def test_a_row_lock_taken_first_serializes_the_pair(stack, txnsafety_violations):
    if not is_pg(stack.url):
        pytest.skip("SQLite renders no FOR UPDATE (and its transactions serialize anyway)")
    with stack.Weak() as session:
        session.scalars(select(Counter).where(Counter.id == 1).with_for_update()).one()
        if not _check(session, "first"):
            session.add(Member(id=1, email="zed@example.org"))
            session.commit()
    assert txnsafety_violations == []


def _two_at_once(stack, make):
    barrier = threading.Barrier(2)
    errors = []

    def request(pk: int) -> None:
        with txnsafety.request_scope("POST /join/"), stack.Weak() as session:
            try:
                found = session.scalars(select(type(make(0))).filter_by(**make(0).__keys__)).first()
                barrier.wait()
                if found is None:
                    session.add(make(pk))
                    session.commit()
            except IntegrityError as exc:
                errors.append(exc)

    threads = [threading.Thread(target=request, args=(pk,)) for pk in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def _member(pk):
    member = Member(id=pk, email="dup@example.org")
    member.__keys__ = {"email": "dup@example.org"}
    return member


def _claim(pk):
    claim = Claim(id=pk, voucher="DUP", user_id=1)
    claim.__keys__ = {"voucher": "DUP", "user_id": 1}
    return claim


def test_two_sessions_both_pass_the_check_and_both_insert(stack, txnsafety_violations):
    if not is_pg(stack.url):
        pytest.skip("the legacy SQLite driver mode serializes the writers' commits differently; PostgreSQL shows it")
    assert _two_at_once(stack, _member) == []
    with stack.Main() as session:
        assert session.scalar(select(func.count()).select_from(Member)) == 2    # the duplicate is made
    assert txnsafety_violations.codes() == ["TXN105", "TXN105"]


def test_the_unique_constraint_turns_the_second_insert_into_an_error(stack, txnsafety_violations):
    if not is_pg(stack.url):
        pytest.skip("the legacy SQLite driver mode serializes the writers' commits differently; PostgreSQL shows it")
    assert len(_two_at_once(stack, _claim)) == 1
    assert txnsafety_violations == []


# -- async: the check in an awaited helper coroutine ----------------------------------------------

async def _member_taken(session, email):
    """The check, in a helper coroutine its caller awaits (AsyncSession runs the ORM in a greenlet)."""
    return (await session.scalars(select(Member).where(Member.email == email))).first() is not None


async def _join(session, email):
    if not await _member_taken(session, email):                       # the check, in the helper
        session.add(Member(id=1, email=email))                        # the act, in its caller
        await session.commit()


async def _validate(session, email):
    if await _member_taken(session, email):
        raise ValueError("taken")


async def _unrelated(session, email):
    await _validate(session, email)                                   # a validation that returned
    session.add(Member(id=1, email=email))                            # later code, not what it guarded
    await session.commit()


@pytest.mark.parametrize("join", [_join, _unrelated])
def test_a_check_in_an_awaited_helper_coroutine_pairs_with_its_callers_insert(stack, join, txnsafety_violations):
    async def main():
        astack = async_stack(stack.url)
        try:
            with txnsafety.request_scope("POST /join/"):
                async with astack.Auto() as session:
                    await join(session, "zed@example.org")
        finally:
            await astack.dispose()

    asyncio.run(main())
    if join is _unrelated:
        assert txnsafety_violations == []
        return
    (violation,) = txnsafety_violations
    assert violation.code.value == "TXN105"
    assert violation.read_site.file == HERE and violation.read_site.function == "_member_taken"


# -- what a check costs: nothing kept for a lookup a unique key settles ----------------------------

def test_a_lookup_a_unique_key_covers_keeps_no_check(stack, txnsafety_violations):
    """A lookup by primary key, or on columns a unique constraint covers, that found nothing is no
    check (the database rejects a second insert): the request keeps nothing for it; a lookup on
    columns no unique key covers is kept."""
    with txnsafety.request_scope("POST /join/") as scope, stack.Auto() as session:
        assert session.scalars(select(Member).where(Member.id == 5)).first() is None
        assert session.query(Member).filter_by(id=6).first() is None
        assert session.scalars(select(Claim).where(Claim.voucher == "V", Claim.user_id == 1)).first() is None
        assert session.scalar(select(func.count()).select_from(Claim).filter_by(voucher="V", user_id=1)) == 0
        assert not scope.lookups
        assert session.scalars(select(Claim).where(Claim.voucher == "V")).first() is None
        assert [entry[0] for entry in scope.lookups[Claim]] == [frozenset({("voucher", "V")})]
    assert txnsafety_violations == []
