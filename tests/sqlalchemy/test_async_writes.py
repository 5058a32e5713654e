"""The new judgements through SQLAlchemy's asyncio extension: blind and derived writes,
``merge()`` of a copy from an earlier request, check-then-act (SQLite and PostgreSQL)."""
from __future__ import annotations

import asyncio
import pickle

from sqlalchemy import select

import txnsafety
from fixtures.sqla_app.engines import async_stack
from fixtures.sqla_app.models import Account, Entry


def _run(fresh_db, body):
    async def main():
        astack = async_stack(fresh_db)
        try:
            await body(astack)
        finally:
            await astack.dispose()
    asyncio.run(main())


def test_async_blind_write_is_silent_and_derived_write_is_reported(fresh_db, txnsafety_violations):
    async def body(astack):
        async with astack.Auto() as session:
            account = await session.get(Account, 1)
            account.owner = "typed in a form"
            await session.commit()
        assert txnsafety_violations == []
        async with astack.Auto() as session:
            account = await session.get(Account, 1)
            account.balance += 1
            await session.commit()

    _run(fresh_db, body)
    assert txnsafety_violations.codes() == ["TXN102"]


def test_async_merge_of_a_cached_copy_is_reported(fresh_db, txnsafety_violations):
    async def body(astack):
        with txnsafety.request_scope("GET /account/1/"):
            async with astack.Main() as session:
                cached = pickle.dumps(await session.get(Account, 1))
        with txnsafety.request_scope("POST /account/1/credit/"):
            async with astack.Main() as session:
                account = await session.merge(pickle.loads(cached))
                account.balance += 1
                await session.commit()

    _run(fresh_db, body)
    assert txnsafety_violations.codes() == ["TXN101"]


def test_async_check_then_act_is_reported(fresh_db, txnsafety_violations):
    async def body(astack):
        async with astack.Auto() as session:
            found = (await session.scalars(select(Entry).where(Entry.amount == 77))).first()
            if found is None:
                session.add(Entry(id=9, account_id=1, amount=77))
                await session.commit()

    _run(fresh_db, body)
    assert txnsafety_violations.codes() == ["TXN105"]
    assert txnsafety_violations[0].detail["keys"] == "amount"
