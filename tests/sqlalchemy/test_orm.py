"""The SQLAlchemy integration on real SQLite and PostgreSQL, without a web server.

How reads, writes and transactions are seen; the isolation verdicts; every kind of
thing ``instrument()`` accepts; the refetcher; what is deliberately not reported.
"""
from __future__ import annotations

import asyncio
import gc
import threading
import weakref

import pytest
from sqlalchemy import create_engine, inspect, select, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, scoped_session, selectinload, sessionmaker

import txnsafety
from fixtures.sqla_app.engines import async_stack, sync_stack
from fixtures.sqla_app.models import Account, Counter, Entry, LockedCounter, Note, Tally, reset
from txnsafety import adapters
from txnsafety.sqlalchemy import instrument, is_instrumented, sqlite_transactions, transaction_of

from .conftest import is_pg


@pytest.fixture
def stack(fresh_db):
    s = sync_stack(fresh_db)
    yield s
    s.dispose()


def stamp(obj):
    return txnsafety.read_stamp(obj)


# -- instrument() ---------------------------------------------------------------------

def test_instrument_accepts_every_kind_of_session_factory(fresh_db):
    engine = create_engine(fresh_db)
    try:
        single = Session(engine)
        maker = sessionmaker(engine)
        scoped = scoped_session(sessionmaker(engine))

        class AppSession(Session):
            pass

        kinds = [(single, lambda: single), (maker, maker), (scoped, scoped),
                 (AppSession, lambda: AppSession(engine))]
        for target, make in kinds:
            assert instrument(target) is target
            session = make()
            assert is_instrumented(session)
            acct = session.get(Account, 1)
            assert stamp(acct) is not None and stamp(acct).transaction == transaction_of(session)
            session.rollback()
            session.close()
        scoped.remove()
        assert not is_instrumented(sessionmaker(engine)())  # another factory stays unchecked
    finally:
        engine.dispose()


def test_instrument_is_idempotent_and_rejects_other_things(stack, txnsafety_violations):
    instrument(stack.Auto)
    instrument(stack.Auto)
    with stack.Auto() as session:
        acct = session.get(Account, 1)
        acct.balance += 1
        session.commit()
    assert txnsafety_violations.codes() == ["TXN102"]      # once, not twice
    with pytest.raises(TypeError, match="instrument"):
        instrument(object())


def test_factories_made_after_others_were_garbage_collected_are_instrumented(fresh_db):
    """SQLAlchemy's listener registry is keyed by id(target): a new sessionmaker's
    Session subclass can reuse the id of a dead one.  Each must still be checked."""
    import gc
    engine = create_engine(fresh_db)
    try:
        for _ in range(40):
            maker = instrument(sessionmaker(engine))
            with maker() as session:
                acct = session.get(Account, 1)
                assert stamp(acct) is not None and transaction_of(session) is not None
            del maker, session, acct
            gc.collect()
    finally:
        engine.dispose()


def test_async_session_and_async_sessionmaker(fresh_db, txnsafety_violations):
    from sqlalchemy.ext.asyncio import AsyncSession, async_scoped_session, async_sessionmaker

    async def main():
        astack = async_stack(fresh_db)        # its makers are instrumented
        try:
            async with astack.Auto() as session:
                assert is_instrumented(session)
                acct = await session.get(Account, 1)
                acct.balance += 1
                await session.commit()
            other = async_sessionmaker(astack.main)          # not instrumented: shares no class
            async with other() as session:
                assert not is_instrumented(session)
            single = AsyncSession(astack.auto)
            instrument(single)
            tally = await single.get(Tally, 1)
            assert stamp(tally) is not None and stamp(tally).transaction is None   # AUTOCOMMIT
            await single.close()
            scoped = async_scoped_session(async_sessionmaker(astack.main), scopefunc=asyncio.current_task)
            instrument(scoped)
            assert is_instrumented(scoped())
            await scoped.remove()
        finally:
            await astack.dispose()
    asyncio.run(main())
    assert txnsafety_violations.codes() == ["TXN102"]
    assert txnsafety_violations[0].write_site.function == "main"   # the user's coroutine, across the greenlet


def test_flask_sqlalchemy_extension(fresh_db, txnsafety_violations):
    from flask import Flask
    from flask_sqlalchemy import SQLAlchemy
    app = Flask(__name__)
    app.config["SQLALCHEMY_DATABASE_URI"] = fresh_db
    db = SQLAlchemy()
    db.init_app(app)
    assert instrument(db) is db
    with app.app_context():
        acct = db.session.get(Account, 1)
        assert stamp(acct).transaction == transaction_of(db.session)
        db.session.rollback()
        db.engine.dispose()


def test_uninstrumented_sessions_cost_nothing_and_report_nothing(fresh_db, txnsafety_violations):
    engine = create_engine(fresh_db, isolation_level="AUTOCOMMIT")
    with Session(engine) as session:
        acct = session.get(Account, 1)
        assert stamp(acct) is None
        acct.balance += 1
        session.commit()
    engine.dispose()
    assert txnsafety_violations == []


# -- transactions -----------------------------------------------------------------------

def test_rows_turned_into_objects_after_the_commit_were_read_outside_it(stack):
    with stack.Main() as session:
        result = session.execute(select(Account).where(Account.id == 1))
        session.commit()
        acct = result.scalars().first()          # the ORM makes the object now, after the root ended
        assert stamp(acct) is not None and stamp(acct).transaction is None
        assert transaction_of(session) is None


def test_an_ended_session_is_freed_without_the_cycle_collector(stack):
    """Our per-Session state must not tie the Session into a reference cycle once its
    transaction ended (a server that freezes or disables the GC would keep every one)."""
    session = stack.Main()
    session.get(Account, 1)
    session.commit()
    session.close()
    gone = weakref.ref(session)
    gc.disable()
    try:
        del session
        assert gone() is None
    finally:
        gc.enable()


def test_each_root_transaction_has_its_own_identity_savepoints_share_it(stack):
    with stack.Main() as session:
        acct = session.get(Account, 1)
        first = stamp(acct).transaction
        assert first is not None and first == transaction_of(session) and not first.is_savepoint
        with session.begin_nested():
            entry = session.get(Entry, 1)
            assert stamp(entry).transaction.root_id == first.root_id
        session.commit()
        assert transaction_of(session) is None                  # between roots: none
        session.refresh(acct)                                   # autobegins the next root
        second = stamp(acct).transaction
        assert second.root_id != first.root_id
        session.rollback()
        session.get(Account, 1, populate_existing=True)
        assert stamp(acct).transaction.root_id not in (first.root_id, second.root_id)


def test_isolation_verdicts(stack):
    with stack.Main() as main, stack.Weak() as weak, stack.Auto() as auto:
        main.get(Account, 1)
        weak.get(Account, 1)
        auto.get(Account, 1)
        assert transaction_of(main).prevents_lost_update is True
        assert transaction_of(weak).prevents_lost_update is False
        assert transaction_of(auto) is None
        if is_pg(stack.url):
            assert transaction_of(main).isolation == "REPEATABLE READ"
            assert transaction_of(weak).isolation == "READ COMMITTED"
        else:
            assert "legacy mode" in transaction_of(weak).isolation
    if is_pg(stack.url):
        with Session(stack.main) as session:
            instrument(session)
            session.connection(execution_options={"isolation_level": "SERIALIZABLE"})
            assert transaction_of(session).isolation == "SERIALIZABLE"
            assert transaction_of(session).prevents_lost_update


def test_reads_through_select_relationships_and_refresh(stack):
    with stack.Main() as session:
        acct = session.execute(select(Account).where(Account.id == 1)).scalar_one()
        first = stamp(acct)
        assert first is not None and first.for_update is False
        entry = acct.entries[0]                                 # lazy relationship load
        assert stamp(entry) is not None and stamp(entry).transaction == first.transaction
        session.expire(acct, ["balance"])
        acct.balance                                            # partial refresh: keeps the old stamp
        assert stamp(acct) is first
        session.refresh(acct)                                   # a full refresh re-stamps
        assert stamp(acct).tick > first.tick
        session.expunge_all()
        again = session.execute(select(Account).options(selectinload(Account.entries))).scalar_one()
        assert stamp(again) is not None and stamp(again.entries[0]) is not None


def test_loaded_rows_are_not_kept_alive_by_the_checker(stack):
    """A read is left on the row's InstanceState, not held by the request: the identity
    map (weak) drops what the code does not keep, as it does without txnsafety, and
    a list endpoint does not pin every row until the request ends."""
    with stack.Main() as session:
        rows = session.scalars(select(Account)).all() + session.scalars(select(Entry)).all()
        gone = [weakref.ref(row) for row in rows]
        kept = rows[0]
        first = stamp(kept)
        del rows
        gc.collect()
        assert [ref() is None for ref in gone] == [False] + [True] * (len(gone) - 1)
        assert stamp(kept) is first                              # asking twice: the same stamp
        assert session.get(Account, 1) is kept                   # still in the identity map


def test_forget_drops_a_read_left_on_the_object(stack):
    with stack.Main() as session:
        acct = session.get(Account, 1)
        assert stamp(acct) is not None
        txnsafety.forget(acct)
        assert stamp(acct) is None                               # not taken in again
        session.refresh(acct)                                    # a new read stamps again
        assert stamp(acct) is not None


def test_a_forgotten_object_stays_forgotten_when_its_session_closes(stack):
    """Closing the Session leaves each object's read on it, but not over a read left there for the
    same values already (forget(), merge()): a forgotten object is not taken in again."""
    with stack.Main() as session:
        acct = session.get(Account, 1)
        txnsafety.forget(acct)
    assert stamp(acct) is None


def test_an_atomic_rewrite_of_a_written_once_row_is_still_txn110(stack, txnsafety_violations):
    """The read left on the object is taken in before any write of it is judged, also a
    write that only sets SQL expressions (atomic, but still a re-write)."""
    from sqlalchemy import Integer
    from sqlalchemy.orm import DeclarativeBase, mapped_column

    class LocalBase(DeclarativeBase):
        pass

    @txnsafety.written_once()
    class Receipt(LocalBase):
        __tablename__ = "receipt_once"
        id = mapped_column(Integer, primary_key=True, autoincrement=False)
        n = mapped_column(Integer, default=0)

    LocalBase.metadata.create_all(stack.main)
    with stack.main.begin() as conn:
        conn.execute(Receipt.__table__.insert(), [{"id": 1, "n": 0}])
    with stack.Main() as session:
        receipt = session.get(Receipt, 1)
        receipt.n = Receipt.n + 1
        session.commit()
    assert txnsafety_violations.codes() == ["TXN110"]
    with stack.Main(expire_on_commit=False) as session:
        with txnsafety.request_scope("GET /receipt"):
            receipt = session.get(Receipt, 1)
            session.commit()
        with txnsafety.request_scope("POST /receipt"):           # a later request writes it
            receipt.n = Receipt.n + 1
            session.commit()
    assert txnsafety_violations.codes() == ["TXN110", "TXN110"]


def test_reads_pickled_before_deferred_reads_still_count(stack, txnsafety_violations, caplog):
    """An object pickled by the previous release carries ``(leases, site)``: it still
    counts as read in an earlier request, and pickles again."""
    import pickle

    from txnsafety.sqlalchemy.detached import on_unpickle as _on_unpickle
    from txnsafety.sqlalchemy.reads import READ_ATTR as _READ_ATTR
    with stack.Weak(expire_on_commit=False) as session:
        counter = session.get(Counter, 1)
        state = inspect(counter)
        vars(state).pop(_READ_ATTR, None)
        _on_unpickle(state, {_READ_ATTR: ((), None)})          # what an old pickle restores
        pickle.dumps(counter)
        counter.n += 1
        session.commit()
    assert txnsafety_violations.codes() == ["TXN101"]                # read outside, written inside
    assert "internal error" not in caplog.text


def test_a_refresh_the_checker_failed_on_leaves_no_older_read(stack, txnsafety_violations, caplog,
                                                              monkeypatch):
    """The refresh replaced the values; the read from before it no longer says when they
    were read, so it goes (the write is then unchecked) instead of giving a false report."""
    from txnsafety.sqlalchemy import reads

    with stack.Main(expire_on_commit=False) as session:
        acct = session.get(Account, 1)
        session.commit()                                         # the read belongs to the ended root

        def broken(*args):
            raise RuntimeError("injected")
        monkeypatch.setattr(reads, "statement_read", broken)
        session.get(Account, 1, populate_existing=True)          # re-read in the next root: fails
        monkeypatch.undo()
        assert stamp(acct) is None and "internal error" in caplog.text
        acct.balance += 1
        session.commit()
    assert txnsafety_violations == []


def test_objects_that_answer_every_attribute_are_not_taken_for_orm_objects():
    """The checker asks objects for a read SQLAlchemy left on them; a mock or a proxy
    answers ``_sa_instance_state`` too, and must not break ``read_stamp`` / ``forget``."""
    from unittest import mock

    @txnsafety.written_in_transaction()
    class Thing:
        pass

    with txnsafety.request_scope("mock"):
        entity = mock.Mock()
        txnsafety.record_read(entity, model=Thing)
        assert txnsafety.read_stamp(entity).entity is entity
        txnsafety.forget(entity)
        assert txnsafety.read_stamp(entity) is None


def test_for_update_reads(stack):
    with stack.Weak() as session:
        acct = session.execute(select(Account).with_for_update()).scalar_one()
        entry = session.execute(select(Entry)).scalar_one()
        # SQLite renders no FOR UPDATE: nothing was locked.
        assert stamp(acct).for_update is is_pg(stack.url)
        assert stamp(entry).for_update is False
    with stack.Weak() as session:
        acct = session.get(Account, 1)
        session.refresh(acct, with_for_update=True)             # a non-stale locked refresh
        assert stamp(acct).for_update is is_pg(stack.url)
        assert stamp(acct).stale_lock is False


# -- writes -------------------------------------------------------------------------------

def test_internal_stomping_across_sessions_in_weak_transactions(stack, txnsafety_violations):
    """PostgreSQL READ COMMITTED / SQLite legacy driver mode: the database lets it through."""
    with stack.Weak() as outer, stack.Weak() as inner:
        mine = outer.get(Account, 1)
        theirs = inner.get(Account, 1)
        theirs.balance += 5
        inner.commit()
        mine.balance += 10
        outer.commit()
    assert txnsafety_violations.codes() == ["TXN109", "TXN109", "TXN103"]
    with stack.plain.connect() as conn:
        assert conn.execute(select(Account.balance)).scalar_one() == 110   # the +5 is gone


def test_a_re_read_after_the_other_write_is_newer_than_it(stack, read_sites, txnsafety_violations):
    """The re-read shares no tick with the statement before it (reads.py ``_instances``:
    consecutive statements share one read only when nothing ticked between them), so
    the write it is based on erases nothing.  (The other write is safe, in a transaction
    that prevents lost updates: a violation before the re-read would have the read
    located, off the path that shares reads.)"""
    with stack.Weak() as outer, stack.Main() as inner:
        mine = outer.get(Account, 1)
        theirs = inner.get(Account, 1)
        theirs.balance += 5
        inner.commit()
        again = outer.execute(select(Account).where(Account.id == 1)
                              .execution_options(populate_existing=True)).scalar_one()
        assert again is mine and mine.balance == 105
        mine.balance += 10
        outer.commit()
    assert txnsafety_violations.codes() == ["TXN109"]                    # weak isolation; nothing erased
    with stack.plain.connect() as conn:
        assert conn.execute(select(Account.balance)).scalar_one() == 115   # nothing lost


def test_relationship_only_change_is_not_a_write_of_the_parent(stack, txnsafety_violations):
    with stack.Auto() as session:
        acct = session.get(Account, 1)
        acct.entries.append(Entry(id=2, amount=1))              # INSERT of the child only
        session.commit()
    assert txnsafety_violations == []


def test_a_column_set_back_to_its_loaded_value_is_not_a_write(stack, txnsafety_violations):
    """The flush sends no UPDATE for it, so nothing can be stomped; the same object set
    to a new value is the unprotected read-modify-write (Auto: autocommit reads)."""
    with stack.Auto() as session:
        acct = session.get(Account, 1)
        loaded = acct.balance
        acct.balance = loaded + 5
        acct.balance = loaded
        session.commit()
    assert txnsafety_violations == []
    with stack.Auto() as session:
        acct = session.get(Account, 1)
        acct.balance += 5
        session.commit()
    assert txnsafety_violations.codes() == ["TXN102"]


def test_a_column_set_to_a_sql_expression_is_atomic(stack, txnsafety_violations):
    """``acct.balance = Account.balance + 1``: the database computes it, nothing to stomp."""
    with stack.Auto() as session:
        acct = session.get(Account, 1)
        acct.balance = Account.balance + 1
        session.commit()
        session.refresh(acct)
        assert acct.balance == 101
    assert txnsafety_violations == []


def test_creations_need_no_read_protection(stack, txnsafety_violations):
    with stack.Auto() as session:
        session.add(Account(id=2, balance=0))
        session.commit()
        session.add(Note(id=2, text="x"))
        session.commit()
    assert txnsafety_violations == []


def test_merge_of_a_new_object_does_not_break_the_session(stack, txnsafety_violations, caplog):
    """Session.merge() fires the load event with no query context: nothing to stamp, no error."""
    with stack.Auto() as session:
        merged = session.merge(Account(id=3, balance=7))
        session.commit()
        assert merged.balance == 7
        again = session.merge(Account(id=1, balance=5))   # merges onto the existing row
        session.commit()
        assert again.balance == 5
    assert not [r for r in caplog.records if r.name == "txnsafety" and r.levelname == "ERROR"]
    # merging onto the existing row reads it (Session.get) and writes it back, unprotected
    assert txnsafety_violations.codes() == ["TXN102"]


def test_models_without_policy_are_unchecked_unless_strict(stack, txnsafety_violations):
    with stack.Auto() as session:
        note = session.get(Note, 1)
        note.text = "a"
        session.commit()
    assert txnsafety_violations == []
    txnsafety.configure(strict=True)
    try:
        with stack.Auto() as session:
            note = session.get(Note, 1)
            note.text += "b"                                  # derived from the read ("a")
            session.commit()
    finally:
        txnsafety.configure(strict=False)
    assert txnsafety_violations.codes() == ["TXN102"]


def test_bulk_statements_are_never_reported(stack, txnsafety_violations):
    for factory in (stack.Auto, stack.Weak):
        with factory() as session:
            session.get(Account, 1)
            session.execute(update(Account).where(Account.id == 1).values(balance=Account.balance + 1))
            session.execute(update(Account), [{"id": 1, "owner": "bob"}])     # bulk UPDATE by primary key
            session.commit()
    assert txnsafety_violations == []


def test_stale_lock_inside_one_serializable_transaction_is_not_reported(stack, txnsafety_violations):
    with stack.Main() as session:
        acct = session.get(Account, 1)
        session.get(Account, 1, with_for_update=True)           # same snapshot: nothing is stale
        acct.balance += 1
        session.commit()
    assert txnsafety_violations == []


def _stale_lock(stack) -> None:
    """Read, commit, lock the row FOR UPDATE (an identity-map hit: not refreshed), write."""
    with stack.Main(expire_on_commit=False) as session:
        acct = session.get(Account, 1)
        session.commit()
        session.execute(select(Account).with_for_update()).scalar_one()
        acct.balance += 1
        session.commit()


def test_stale_lock_after_another_transaction_is_reported(stack, txnsafety_violations):
    _stale_lock(stack)
    expected = ["TXN104", "TXN112"] if is_pg(stack.url) else ["TXN104"]
    assert txnsafety_violations.codes() == expected


def test_the_checker_puts_no_listener_on_the_engine(stack, txnsafety_violations):
    """FOR UPDATE statements are noted where the ORM's statements pass anyway (``loading.instances``),
    never by an engine-level listener: any ``ConnectionEvents`` listener puts every statement of
    the engine, the application's unchecked ones too, on SQLAlchemy's evented path (about four
    points of the PostgreSQL benchmark request by itself)."""
    _stale_lock(stack)
    assert not stack.main.dispatch.before_execute
    if is_pg(stack.url):  # (SQLite's engine has the BEGIN recipe's own listeners)
        assert not stack.main._has_events  # private: the test that takes SQLAlchemy's evented path
    assert txnsafety_violations.codes() == (["TXN104", "TXN112"] if is_pg(stack.url) else ["TXN104"])


def test_for_update_of_an_identity_map_object_on_autocommit_is_txn108(stack, txnsafety_violations):
    with stack.Auto() as session:
        kept = session.get(Account, 1)  # held: the identity map keeps only objects the code keeps
        assert session.get(Account, 1, with_for_update=True) is kept
    # SQLite takes no row locks and gets no statement hook: only rows loaded FOR UPDATE report it.
    assert txnsafety_violations.codes() == (["TXN108"] if is_pg(stack.url) else [])


# -- SQLite: the verdict is the database's behaviour ---------------------------------------

def _interleaved_increments(engine) -> int:
    """Two Sessions both read counter 1, then both write: returns the final value."""
    with engine.begin() as conn:
        conn.execute(update(Counter).values(n=0))
    first, second = Session(engine), Session(engine)
    try:
        a, b = first.get(Counter, 1), second.get(Counter, 1)
        a.n += 1
        first.commit()
        b.n += 1
        second.commit()
    finally:
        first.close()
        second.close()
    with engine.connect() as conn:
        return conn.execute(select(Counter.n)).scalar_one()


def test_sqlite_legacy_driver_mode_loses_updates_and_the_recipe_prevents_it(sqlite_url):
    with create_engine(sqlite_url).begin() as conn:
        reset(conn)
    legacy = create_engine(sqlite_url)
    assert _interleaved_increments(legacy) == 1                     # lost update: TXN109 is right
    legacy.dispose()
    recipe = sqlite_transactions(create_engine(sqlite_url, connect_args={"timeout": 0.2}))
    with pytest.raises(OperationalError, match="locked"):
        _interleaved_increments(recipe)                             # refused, not lost
    recipe.dispose()


# -- the refetcher (fetch_under_lock) -------------------------------------------------------

def test_refetch_refreshes_in_place_and_restamps(stack):
    with stack.Weak() as session:
        acct = session.get(Account, 1)
        before = stamp(acct)
        with stack.plain.begin() as conn:
            conn.execute(update(Account).values(balance=7))
        assert adapters.refetch(acct) is acct
        assert acct.balance == 7 and stamp(acct).tick > before.tick
    with pytest.raises(TypeError, match="detached"):
        adapters.refetch(acct)


def test_async_refetch_uses_the_async_session(fresh_db):
    async def main():
        astack = async_stack(fresh_db)
        try:
            async with astack.Weak() as session:
                acct = await session.get(Account, 1)
                async with astack.plain.begin() as conn:
                    await conn.execute(update(Account).values(balance=8))
                assert await adapters.arefetch(acct) is acct
                assert acct.balance == 8
        finally:
            await astack.dispose()
    asyncio.run(main())


def test_fetch_under_lock_with_sqlalchemy_entities(stack, read_sites, txnsafety_violations):
    """(Also as production runs, ``read_sites``: the re-read under the lock is a common statement
    there, whose read must not be shared with the one before the lock was taken.)"""
    from txnsafety.locks import fetch_under_lock, user_write_lock
    with stack.Weak() as session:
        counter = session.get(LockedCounter, 1)                 # read without the lock
        with fetch_under_lock(counter) as locked:
            locked.n += 1
            session.commit()
    assert txnsafety_violations == []
    with stack.Weak() as session:
        counter = session.get(LockedCounter, 1)
        with user_write_lock("counter:1"):                      # the lock, but the read was outside
            counter.n += 1
            session.commit()
    assert txnsafety_violations.codes() == ["TXN101"]


def test_an_object_read_under_a_lock_still_pickles(stack):
    """The read's mark rides along when the object is pickled (a cache server), but not
    its leases: a lease belongs to the request that held it and need not pickle."""
    import pickle

    from txnsafety.locks import user_write_lock
    from txnsafety.sqlalchemy.reads import READ_ATTR as _READ_ATTR, read_of
    with stack.Weak(expire_on_commit=False) as session, user_write_lock("counter:1"):
        counter = session.get(LockedCounter, 1)
        assert read_of(inspect(counter))[3]                      # read under the lease
        session.commit()
    assert read_of(inspect(counter))[3]                          # left on the object when it left the Session
    copy = pickle.loads(pickle.dumps(counter))
    assert copy.n == counter.n
    assert getattr(inspect(copy), _READ_ATTR)[3] == ()


def test_async_fetch_under_lock(fresh_db, read_sites, txnsafety_violations):
    from txnsafety.locks import fetch_under_lock

    async def main():
        astack = async_stack(fresh_db)
        try:
            async with astack.Weak() as session:
                counter = await session.get(LockedCounter, 1)
                async with fetch_under_lock(counter) as locked:
                    locked.n += 1
                    await session.commit()
        finally:
            await astack.dispose()
    asyncio.run(main())
    assert txnsafety_violations == []


def test_checker_errors_never_break_the_session(stack, txnsafety_violations, caplog, monkeypatch):
    from txnsafety.sqlalchemy import events
    monkeypatch.setattr(events, "verdict_for", lambda connection: 1 / 0)
    with stack.Main() as session:
        acct = session.get(Account, 1)
        assert transaction_of(session).prevents_lost_update is False
        acct.balance += 1
        session.commit()
    assert "could not determine the isolation" in caplog.text
    assert txnsafety_violations.codes() == ["TXN109"]          # unknown isolation: assumed weak


def test_concurrent_sessions_in_threads_keep_their_own_transactions(stack):
    barrier = threading.Barrier(2)
    seen = {}

    def work(name):
        with txnsafety.request_scope(name), stack.Main() as session:
            session.get(Account, 1)
            barrier.wait(30)
            seen[name] = transaction_of(session).root_id
            session.rollback()

    threads = [threading.Thread(target=work, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(set(seen.values())) == 2
