"""SQLAlchemy reads are noted once per statement, under its ``runid`` (txnsafety/sqlalchemy/reads.py):
no per-row listener, and every way an object gets its values still says when it was read."""
from __future__ import annotations

import pytest
from sqlalchemy import inspect, select

import txnsafety
from fixtures.sqla_app.engines import sync_stack
from fixtures.sqla_app.models import Account
from txnsafety.sqlalchemy import events, reads, transaction_of


@pytest.fixture
def stack(fresh_db):
    s = sync_stack(fresh_db)
    yield s
    s.dispose()


def test_no_listener_runs_for_each_row_loaded(stack):
    # ``refresh`` fires only for objects already in the Session that get values again
    assert [name for name, _, _ in events._MAPPER_EVENTS if name == "load"] == []
    assert not Account._sa_class_manager.dispatch.load


def test_a_query_refilling_an_expired_object_is_a_new_read(stack, txnsafety_violations):
    with stack.Main() as session:                                    # expire_on_commit
        acct = session.get(Account, 1)
        session.commit()
        again = session.scalars(select(Account).where(Account.id == 1)).one()   # fills the expired object
        assert again is acct and txnsafety.read_stamp(acct).transaction is transaction_of(session)
        acct.balance += 1
        session.commit()
    assert txnsafety_violations.codes() == []


def test_the_rows_of_a_statement_share_its_read(stack):
    with stack.Main() as session:
        session.add_all([Account(id=2, owner="two", balance=0), Account(id=3, owner="three", balance=0)])
        session.commit()
        rows = session.scalars(select(Account).order_by(Account.id)).all()
        txn = transaction_of(session)
        stamps = [txnsafety.read_stamp(row) for row in rows]
        assert len(rows) >= 2 and len({s.tick for s in stamps}) == 1
        assert all(s.transaction is txn and s.entity is row for s, row in zip(stamps, rows))


def test_an_identity_map_hit_keeps_the_older_read(stack, txnsafety_violations):
    with stack.Main(expire_on_commit=False) as session:
        acct = session.get(Account, 1)
        first = txnsafety.read_stamp(acct).transaction
        session.commit()
        assert session.scalars(select(Account).where(Account.id == 1)).one() is acct   # not repopulated
        assert txnsafety.read_stamp(acct).transaction is first                         # still the first read
        acct.balance += 1
        session.commit()                                                               # written in a later root
    assert txnsafety_violations.codes() == ["TXN104"]


def test_an_object_kept_after_its_session_closed_is_an_earlier_read(stack, txnsafety_violations):
    with txnsafety.request_scope("GET /account/1/"):
        with stack.Main(expire_on_commit=False) as session:
            kept = session.get(Account, 1)
    assert reads.read_of(inspect(kept)) is not None          # left on the object when it left the Session
    with txnsafety.request_scope("POST /account/1/"):
        with stack.Main() as session:
            session.add(kept)                                # the copy from the earlier request
            kept.balance += 1
            session.commit()
    assert txnsafety_violations.codes() == ["TXN101"]        # read outside this request's transaction


def test_results_made_into_objects_after_the_commit_were_read_outside_it_the_others_inside(stack, read_sites):
    """Statements are noted when they run; the root's end finds those whose rows were not
    made into objects yet (more than the 64 kept before pruning) and notes them outside."""
    with stack.Main() as session:
        fetched = session.scalars(select(Account).where(Account.id == 1)).all()
        txn = transaction_of(session)
        for _ in range(70):                                            # fetched: pruned, not kept
            session.scalars(select(Account).where(Account.id == 1)).all()
        later = [session.execute(select(Account).where(Account.id == 1)) for _ in range(3)]
        session.commit()
        assert txnsafety.read_stamp(fetched[0]).transaction is txn
        session.expunge_all()
        for result in later:
            obj = result.scalars().one()
            assert txnsafety.read_stamp(obj).transaction is None and not txnsafety.read_stamp(obj).for_update
