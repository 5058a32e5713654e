"""SQLAlchemy reads are noted once per statement, under its ``runid`` (txnsafety/sqlalchemy/reads.py):
no per-row listener, and every way an object gets its values still says when it was read."""
from __future__ import annotations

import pytest
from sqlalchemy import inspect, select

import txnsafety
from fixtures.sqla_app.models import Account
from txnsafety.sqlalchemy import events, reads, transaction_of


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


def test_the_root_s_last_statement_made_into_objects_after_the_commit_was_read_outside_it(stack, read_sites):
    """The root's end asks its last statement too when no earlier one was left unmade (the common
    end, answered in three tests: reads.root_ended)."""
    with stack.Main() as session:
        fetched = session.scalars(select(Account).where(Account.id == 1)).all()
        txn = transaction_of(session)
        later = session.execute(select(Account).where(Account.id == 1))  # the root's last statement
        session.commit()
        assert txnsafety.read_stamp(fetched[0]).transaction is txn
        session.expunge_all()
        obj = later.scalars().one()
        assert txnsafety.read_stamp(obj).transaction is None


def test_consecutive_statements_share_a_read_until_something_ticks(stack, read_sites):
    with stack.Main() as session:
        session.add_all([Account(id=2, owner="two", balance=0), Account(id=3, owner="three", balance=0)])
        session.commit()
    with stack.Main() as session:
        one = session.get(Account, 1)
        two = session.get(Account, 2)                               # nothing between: one read
        one.balance += 1
        session.flush()                                             # a write ticks
        three = session.get(Account, 3)
        ticks = [txnsafety.read_stamp(obj).tick for obj in (one, two, three)]
    if read_sites == "adaptive":                                    # the common statement's path
        assert ticks[0] == ticks[1] < ticks[2]
    else:                                                           # reads located: one tick each
        assert ticks[0] < ticks[1] < ticks[2]


def test_rows_made_after_the_commit_still_predate_a_write_made_before_it(
        stack, read_sites, txnsafety_violations):
    """The statement ran before the other object's write: its rows, made into objects after
    the commit, hold the values from before that write, and writing them erases it (TXN103),
    whether or not the statement shared an earlier one's read."""
    with stack.Weak() as outer, stack.Weak() as inner:
        result = outer.execute(select(Account).where(Account.id == 1))   # runs now: balance 100
        theirs = inner.get(Account, 1)
        theirs.balance += 5
        inner.commit()                                                   # another object writes the row
        outer.commit()                                                   # the root ends, rows not made yet
        mine = result.scalar_one()                                       # made now, from the earlier SELECT
        assert mine.balance == 100
        mine.balance += 10
        outer.commit()
    with stack.plain.connect() as conn:
        assert conn.execute(select(Account.balance)).scalar_one() == 110   # the +5 is lost
    assert "TXN103" in txnsafety_violations.codes()


def test_a_model_checked_for_internal_stomping_only_still_gets_its_txn103(stack, txnsafety_violations):
    from fixtures.sqla_app.models import Tally
    with stack.Auto() as setup:
        if setup.get(Tally, 1) is None:
            setup.add(Tally(id=1, n=0))
        setup.commit()
    with stack.Weak() as outer, stack.Weak() as inner:
        result = outer.execute(select(Tally).where(Tally.id == 1))        # runs now: n == 0
        theirs = inner.get(Tally, 1)
        theirs.n += 5
        inner.commit()
        outer.commit()
        mine = result.scalar_one()                                        # made from the earlier SELECT
        assert mine.n == 0
        mine.n += 10
        outer.commit()
    with stack.plain.connect() as conn:
        assert conn.execute(select(Tally.n).where(Tally.id == 1)).scalar_one() == 10   # the +5 is lost
    assert txnsafety_violations.codes() == ["TXN103"]


def test_a_re_read_after_a_stamp_was_replaced_is_newer_than_it(stack, read_sites, txnsafety_violations):
    """``record_stale_lock`` replaces the stamp without a tick; the re-read after it (populate_existing)
    still gets a read of its own, newer, so the object is no longer stale."""
    with stack.Main() as session:
        acct = session.get(Account, 1)
        txnsafety.record_stale_lock(acct)
        assert txnsafety.read_stamp(acct).stale_lock
        session.execute(select(Account).where(Account.id == 1).execution_options(populate_existing=True)).one()
        assert not txnsafety.read_stamp(acct).stale_lock
        acct.balance += 1
        session.commit()
    assert txnsafety_violations.codes() == []


@pytest.fixture
def switched_off():
    from txnsafety.config import settings
    settings.enabled = False
    try:
        yield settings
    finally:
        settings.enabled = True


def test_switched_off_a_session_keeps_no_state_and_the_next_transaction_after_is_checked(
        stack, switched_off, txnsafety_violations):
    with stack.Weak() as session:
        acct = session.get(Account, 1)
        assert reads.INFO_KEY not in session.info            # nothing kept while off (not even a verdict)
        switched_off.enabled = True                           # on again, in the middle of the transaction
        acct.balance += 1
        session.commit()                                      # that transaction: unchecked, nothing named stale
        assert txnsafety_violations.codes() == []
        acct = session.get(Account, 1)                        # the next one: checked
        assert transaction_of(session) is not None and txnsafety.read_stamp(acct) is not None
        acct.balance += 1
        session.commit()
    assert txnsafety_violations.codes() == ["TXN109"]        # weak isolation, read-modify-write
