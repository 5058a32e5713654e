"""TXN105 at run time in a long-lived process: the keys of the statement actually run.

SQLAlchemy compiles a statement shape once and keeps the ``Compiled`` object in the
engine's statement cache (on by default); the next statement of that shape reuses it with
its own parameters.  The check's key values must come from the execution that runs, not
from the statement compiled first: every scenario below runs several times in one process,
on one engine with its cache on, with keys ``a``, ``b``, ``c`` in turn (each reported), then a
check of ``z`` followed by an insert of ``a`` (no pair: not reported).
"""
from __future__ import annotations

import asyncio
from typing import Any, Callable

import pytest
from sqlalchemy import bindparam, exists, func, select

import txnsafety
from fixtures.sqla_app.engines import async_stack, sync_stack

from .test_check_then_act import Member
from .test_count_limit import Gig, Ticket

KEYS = ("a", "b", "c")


def _email(key: str) -> str:
    return f"{key}@example.org"


def _gig(key: str) -> int:
    return ord(key) - ord("a") + 1   # a, b, c -> gigs 1, 2, 3; z -> 26 (no gig, no ticket)


# -- the checks (Member keyed on email; Ticket counted per gig) -----------------------------------

def _first(session: Any, key: str) -> bool:
    return session.scalars(select(Member).where(Member.email == _email(key))).first() is None


def _bindparam_first(session: Any, key: str) -> bool:
    """One statement object, its value given at each execution."""
    return session.scalars(_BY_EMAIL, {"email": _email(key)}).first() is None


_BY_EMAIL = select(Member).where(Member.email == bindparam("email"))


def _scalar_one_or_none(session: Any, key: str) -> bool:
    return session.execute(select(Member).filter_by(email=_email(key))).scalar_one_or_none() is None


def _query_first(session: Any, key: str) -> bool:
    return session.query(Member).filter(Member.email == _email(key)).first() is None


def _exists(session: Any, key: str) -> bool:
    return not session.scalar(select(exists().where(Member.email == _email(key))))


def _count_none(session: Any, key: str) -> bool:
    return session.scalar(select(func.count()).select_from(Member).where(Member.email == _email(key))) == 0


def _count_under_limit(session: Any, key: str) -> bool:
    return session.scalar(select(func.count()).select_from(Ticket).where(Ticket.gig_id == _gig(key))) < 2


def _query_count_under_limit(session: Any, key: str) -> bool:
    return session.query(Ticket).filter(Ticket.gig_id == _gig(key)).count() < 2


MEMBER_CHECKS = [_first, _bindparam_first, _scalar_one_or_none, _query_first, _exists, _count_none]
LIMIT_CHECKS = [_count_under_limit, _query_count_under_limit]


def _act(session: Any, check: Callable[[Any, str], bool], key: str, insert_key: str, pk: int) -> None:
    """One request: the check of ``key``, then the insert keyed on ``insert_key``."""
    if check(session, key):
        if check in LIMIT_CHECKS:
            session.add(Ticket(id=pk, gig_id=_gig(insert_key), number=10 + pk))
        else:
            session.add(Member(id=pk, email=_email(insert_key)))
        session.commit()


@pytest.fixture
def stack(fresh_db):
    """Gigs a, b, c of capacity 2, each with one ticket sold; no member."""
    s = sync_stack(fresh_db)
    with s.plain.begin() as conn:
        for table in (Member.__table__, Gig.__table__, Ticket.__table__):
            table.create(conn, checkfirst=True)
        for table in (Member.__table__, Ticket.__table__, Gig.__table__):
            conn.execute(table.delete())
        for key in KEYS:
            conn.execute(Gig.__table__.insert().values(id=_gig(key), capacity=2))
            conn.execute(Ticket.__table__.insert().values(id=100 + _gig(key), gig_id=_gig(key), number=1))
    yield s
    s.dispose()


def _keys_reported(violations: Any) -> list[str]:
    return [v.detail["keys"] for v in violations if v.code.value == "TXN105"]


@pytest.mark.parametrize("check", MEMBER_CHECKS + LIMIT_CHECKS, ids=lambda c: c.__name__.strip("_"))
def test_every_key_is_reported_with_the_statement_cache_on(stack, check, txnsafety_violations):
    assert stack.main.get_execution_options().get("compiled_cache", True) is not None  # the default cache
    for pk, key in enumerate(KEYS, start=1):   # b and c run a, b, c's statement from the cache
        with txnsafety.request_scope("POST /join/"), stack.Auto() as session:
            _act(session, check, key, key, pk)
    assert len(_keys_reported(txnsafety_violations)) == len(KEYS)


@pytest.mark.parametrize("check", MEMBER_CHECKS + LIMIT_CHECKS, ids=lambda c: c.__name__.strip("_"))
def test_a_check_of_one_key_does_not_pair_with_an_insert_of_another(stack, check, txnsafety_violations):
    for pk, key in enumerate(KEYS, start=1):
        with txnsafety.request_scope("POST /join/"), stack.Auto() as session:
            _act(session, check, key, key, pk)
    assert len(_keys_reported(txnsafety_violations)) == len(KEYS)
    txnsafety_violations.clear()
    with txnsafety.request_scope("POST /join/"), stack.Auto() as session:
        _act(session, check, "z", "a", 50)                 # checked z (cached statement: a), inserted a
    assert txnsafety_violations == []


def test_async_checks_take_the_keys_of_each_execution(stack, txnsafety_violations):
    async def taken(session: Any, key: str) -> bool:
        return (await session.scalars(select(Member).where(Member.email == _email(key)))).first() is not None

    async def join(session: Any, key: str, insert_key: str, pk: int) -> None:
        if not await taken(session, key):
            session.add(Member(id=pk, email=_email(insert_key)))
            await session.commit()

    async def main() -> None:
        astack = async_stack(stack.url)
        try:
            for pk, (key, insert_key) in enumerate([("a", "a"), ("b", "b"), ("c", "c"), ("z", "a")], start=1):
                with txnsafety.request_scope("POST /join/"):
                    async with astack.Auto() as session:
                        await join(session, key, insert_key, pk)
        finally:
            await astack.dispose()

    asyncio.run(main())
    assert _keys_reported(txnsafety_violations) == ["email"] * len(KEYS)
