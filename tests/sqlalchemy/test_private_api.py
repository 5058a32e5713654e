"""Pins for the SQLAlchemy internals the integration relies on.

Each private attribute or behaviour used by ``txnsafety/sqlalchemy/events.py``
where no public hook exists is asserted here, so that a SQLAlchemy release that
moves it fails these tests loudly instead of silently weakening the checker.

* ``Select._for_update_arg`` — whether a statement is FOR UPDATE (no public
  accessor), read in the wrapped ``loading.instances`` and in the refresh event
  (``QueryContext.query``).
* ``QueryContext.query`` — the statement a load/refresh event belongs to.
* ``QueryContext.attributes`` — one dict for every row of one statement execution, a
  new one for each (the load hook keeps the statement's read there).
* ``DEFAULT_STATE_ATTR`` — the attribute a mapped object keeps its InstanceState in
  (the checker asks it for the read left there, without ``inspect()``'s registry search).
* Behaviour: ``loading.instances`` gets every FOR UPDATE statement of the ORM
  (``Session.get``, ``select()`` of entities or of their columns, ``Session.refresh``)
  with the ORM's own Select in ``QueryContext.query`` (with ``column_descriptions``);
  the Session's statements run on the same ``Connection`` object that ``after_begin``
  got for its transaction (Core checks find the Session there).
* Behaviour: a FOR UPDATE re-read of an object already in the identity map emits
  no load/refresh event (the stale-lock trap we detect) and ``populate_existing``
  turns it into a refresh event; ``refresh`` gets ``attrs=None`` for a full
  ``Session.refresh``; the asyncio extension runs the ORM in a greenlet whose
  parent holds the user's frames (``greenlet.getcurrent().parent.gr_frame``).
"""
from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import create_engine, event, select
from sqlalchemy.orm import Mapper, Session, loading

from fixtures.sqla_app.models import Account, reset
from txnsafety.sqlalchemy import reads


@pytest.fixture
def engine(sqlite_url):
    eng = create_engine(sqlite_url)
    with eng.begin() as conn:
        reset(conn)
    yield eng
    eng.dispose()


@pytest.fixture
def events():
    """Record the load/refresh events (and what the private attributes say)."""
    seen: list[tuple] = []

    def on_load(target, context):
        seen.append(("load", context.query._for_update_arg is not None))

    def on_refresh(target, context, attrs):
        seen.append(("refresh", context.query._for_update_arg is not None, attrs))

    event.listen(Mapper, "load", on_load)
    event.listen(Mapper, "refresh", on_refresh)
    yield seen
    event.remove(Mapper, "load", on_load)
    event.remove(Mapper, "refresh", on_refresh)


def test_select_for_update_arg_is_where_we_read_it():
    assert select(Account)._for_update_arg is None
    assert select(Account).with_for_update()._for_update_arg is not None
    assert select(Account).with_for_update(nowait=True)._for_update_arg.nowait is True


def test_loading_instances_gets_every_orm_statement_with_its_lock_and_entities(engine, monkeypatch):
    """``loading.instances`` (which the integration wraps) gets the ORM's own Select (FOR UPDATE
    readable, ``column_descriptions`` naming the entity) for Session.get, select() of the entity
    or of one of its columns, and Session.refresh: where FOR UPDATE statements are noted."""
    seen = []
    original = loading.instances

    def capture(cursor, context):
        entities = [d.get("entity") for d in context.query.column_descriptions]
        seen.append((getattr(context.query, "_for_update_arg", None) is not None, entities))
        # reads._entity_classes reads them off the compile state the statement ran with
        compiled = [e.entity_zero.class_ for e in context.compile_state._entities if e.entity_zero.is_mapper]
        assert compiled == entities and reads._entity_classes(context) == tuple(entities)
        return original(cursor, context)

    monkeypatch.setattr(loading, "instances", capture)
    with Session(engine) as session:
        session.get(Account, 1)
        session.get(Account, 1, with_for_update=True)
        session.execute(select(Account).where(Account.id == 1).with_for_update()).all()
        session.execute(select(Account.balance).where(Account.id == 1).with_for_update()).all()
        session.refresh(session.get(Account, 1), with_for_update=True)
    assert seen[0] == (False, [Account])
    assert seen.count((True, [Account])) == 4       # get, select, select of a column, refresh


def test_the_session_executes_on_the_connection_after_begin_saw(engine):
    """after_begin tags the Connection object; before_execute must get that same object
    for the Session's statements (and a separate checkout gets another object)."""
    begun, executed = [], []
    event.listen(engine, "before_execute", lambda conn, clause, multi, params, opts: executed.append(conn))
    with Session(engine) as session:
        event.listen(session, "after_begin", lambda s, t, conn: begun.append(conn))
        session.get(Account, 1)
        session.execute(select(Account).with_for_update()).all()
        with engine.connect() as other:
            other.execute(select(Account))
    assert len(begun) == 1 and executed[0] is begun[0] and executed[1] is begun[0]
    assert executed[2] is not begun[0]


def test_load_and_refresh_events_carry_the_statement(engine, events):
    columns = {"id", "balance", "owner"}
    with Session(engine) as session:
        acct = session.get(Account, 1)
        assert events == [("load", False)]
        del events[:]
        session.get(Account, 1, with_for_update=True)          # identity-map hit: columns not refreshed
        assert all(e[0] == "refresh" and e[1] is True and not (columns & set(e[2])) for e in events), events
        del events[:]
        session.get(Account, 1, with_for_update=True, populate_existing=True)
        assert events == [("refresh", True, None)]
        del events[:]
        session.refresh(acct)
        assert events == [("refresh", False, None)]
        del events[:]
        session.expire(acct, ["balance"])
        acct.balance
        assert len(events) == 1 and events[0][:2] == ("refresh", False)
        assert "balance" in events[0][2] and not {"id", "owner"} & set(events[0][2])


def test_query_context_attributes_are_one_dict_per_statement(engine):
    """The load hook keeps a statement's read in ``QueryContext.attributes``: one dict
    for all rows of one execution (joined eager loads included), a new one for the next."""
    seen: list[tuple[dict, int]] = []  # the dicts themselves: kept alive, their identity cannot be reused

    def on_load(state, context):
        assert isinstance(context.attributes, dict)
        seen.append((context.attributes, state.key[1][0]))
        context.attributes.setdefault(("test", "rows"), []).append(state.key[1][0])

    event.listen(Account, "load", on_load, raw=True)
    try:
        with Session(engine) as session:
            session.add_all([Account(id=2, balance=0, owner="b"), Account(id=3, balance=0, owner="c")])
            session.commit()
            session.expunge_all()
            kept = session.scalars(select(Account).order_by(Account.id)).all()
            session.expunge_all()
            kept += [session.get(Account, 1)]
    finally:
        event.remove(Account, "load", on_load)
    first = seen[0][0]
    assert all(attributes is first for attributes, _ in seen[:3]) and first[("test", "rows")] == [1, 2, 3]
    assert seen[3][0] is not first and seen[3][1] == 1 and len(kept) == 4  # the next statement: a new one


def test_a_mapped_object_keeps_its_state_in_default_state_attr(engine):
    from sqlalchemy import inspect
    from sqlalchemy.orm.base import DEFAULT_STATE_ATTR

    with Session(engine) as session:
        acct = session.get(Account, 1)
        assert getattr(acct, DEFAULT_STATE_ATTR) is inspect(acct)
    assert getattr(object(), DEFAULT_STATE_ATTR, None) is None


def test_async_orm_runs_in_a_greenlet_whose_parent_holds_the_user_frames(sqlite_url):
    import greenlet
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    from fixtures.sqla_app.engines import async_url
    found = []

    def on_load(target, context):
        parent = greenlet.getcurrent().parent
        frame = parent.gr_frame if parent is not None else None
        names = []
        while frame is not None:
            names.append(frame.f_code.co_name)
            frame = frame.f_back
        found.append(names)

    async def user_coroutine():
        engine = create_async_engine(async_url(sqlite_url))
        async with AsyncSession(engine) as session:
            await session.get(Account, 1)
        await engine.dispose()

    with create_engine(sqlite_url).begin() as conn:
        reset(conn)
    event.listen(Mapper, "load", on_load)
    try:
        asyncio.run(user_coroutine())
    finally:
        event.remove(Mapper, "load", on_load)
    assert found and "user_coroutine" in found[0]


def test_committed_state_names_exactly_the_attributes_set_since_the_load(engine):
    """``InstanceState.committed_state``: the flush hook reads it to find the columns
    that may have changed (``unmodified``, the public view, builds a set of every
    attribute on every write).  It must hold a column once set, even back to its
    old value, and a column set to a SQL expression; nothing else."""
    from sqlalchemy import inspect

    with Session(engine) as session:
        acct = session.get(Account, 1)
        state = inspect(acct)
        assert not state.committed_state
        acct.balance = acct.balance + 1
        assert set(state.committed_state) == {"balance"}
        assert {c.key for c in inspect(Account).column_attrs} - state.unmodified == {"balance"}
        acct.owner = Account.owner + "x"  # a SQL expression, evaluated by the database
        assert set(state.committed_state) == {"balance", "owner"}
        session.rollback()


def test_instance_state_takes_an_attribute_of_ours(engine):
    """The load hook leaves ``_txnsafety_read`` on the InstanceState (one attribute
    store per row instead of the memoized ``info`` dict); InstanceState keeps a
    ``__dict__`` slot for its memoized properties, so it can."""
    from sqlalchemy import inspect

    with Session(engine) as session:
        state = inspect(session.get(Account, 1))
        state._txnsafety_read = ((), None)
        assert state._txnsafety_read == ((), None)
        assert "__dict__" in type(state).__slots__ or not hasattr(type(state), "__slots__")


def test_attribute_impl_is_equal_is_what_the_flush_compares_with():
    """``class_manager[key].impl.is_equal``: the flush hook asks it, as the flush does
    (``persistence._collect_update_commands``), whether a set column is back to its
    loaded value, instead of building a History per column."""
    from sqlalchemy import inspect

    mapper = inspect(Account)
    for prop in mapper.column_attrs:
        is_equal = mapper.class_manager[prop.key].impl.is_equal
        assert is_equal(5, 5) is True and is_equal(5, 6) is not True


def test_the_flush_hook_sees_what_the_update_sends(engine):
    """A column set back to its loaded value is not sent (no UPDATE at all); one set
    to another value is; the hook's view of "changed" must agree with the SQL."""
    sent = []

    def capture(conn, cursor, statement, *rest):
        if statement.startswith("UPDATE"):
            sent.append(statement)

    event.listen(engine, "before_cursor_execute", capture)
    try:
        with Session(engine) as session:
            acct = session.get(Account, 1)
            old = acct.balance
            acct.balance = old + 1
            acct.balance = old          # back to the loaded value
            session.flush()
            assert sent == []
            acct.owner = "someone else"
            session.flush()
            assert len(sent) == 1 and "owner" in sent[0] and "balance" not in sent[0]
            session.rollback()
    finally:
        event.remove(engine, "before_cursor_execute", capture)


def test_session_merge_goes_through_session__merge_once_per_object(engine):
    """``merge.py`` wraps ``Session._merge(state, state_dict, **kw) -> merged object``."""
    import inspect as pyinspect

    from txnsafety.sqlalchemy import merge
    params = list(pyinspect.signature(merge._original_merge).parameters)
    assert params[:3] == ["self", "state", "state_dict"], "Session._merge changed its signature"
    seen = []
    installed = Session._merge

    def spy(self, state, state_dict, **kwargs):
        result = merge._original_merge(self, state, state_dict, **kwargs)
        seen.append((state.obj(), result))
        return result

    Session._merge = spy
    try:
        with Session(engine) as session:
            copy = Account(id=1, balance=5)
            merged = session.merge(copy)
    finally:
        Session._merge = installed
    assert seen == [(copy, merged)], "Session.merge() no longer calls Session._merge for the object"


def test_one_row_accessors_go_through_result_only_one_row(engine):
    """``lookups.py`` replaces the public one-row accessors (``first()``, ``one()``, ``scalar()``...
    of Result, ScalarResult and MappingResult) by functions that call ``ResultInternal._only_one_row``
    themselves, with the arguments of ``lookups.ONE_ROW_ACCESSORS``: SQLAlchemy's own accessors must
    make exactly that one call, and the statement is the ``context.compiled.statement`` of the
    result's ``raw`` CursorResult (an ORM result's, or the Core result itself)."""
    from sqlalchemy.engine import result as sa_result

    from txnsafety.sqlalchemy import lookups
    seen = []
    installed = sa_result.ResultInternal._only_one_row

    def spy(self, raise_for_second_row, raise_for_none, scalar):
        real = getattr(self, "_real_result", None) or self
        cursor = getattr(real, "raw", None) or real
        seen.append(((raise_for_second_row, raise_for_none, scalar), cursor.context.compiled.statement))
        return lookups._original(self, raise_for_second_row, raise_for_none, scalar)

    stmt = select(Account).where(Account.id == 99)
    sa_result.ResultInternal._only_one_row = spy
    try:
        with Session(engine) as session:
            for cls, name, *arguments in lookups.ONE_ROW_ACCESSORS:
                result = {sa_result.Result: lambda: session.execute(stmt),
                          sa_result.ScalarResult: lambda: session.scalars(stmt),
                          sa_result.MappingResult: lambda: session.execute(stmt).mappings()}[cls]()
                assert isinstance(result, cls)
                seen.clear()
                try:
                    lookups._original_accessors[cls, name](result)
                except Exception:
                    pass  # one() of no row raises, after the call
                assert [call for call, _ in seen] == [tuple(arguments)], f"{cls.__name__}.{name}"
                assert seen[0][1].whereclause is not None
    finally:
        sa_result.ResultInternal._only_one_row = installed


def test_one_row_accessors_are_replaced_while_installed():
    """The replaced accessors are in place while the mapper listeners are, and SQLAlchemy's own
    come back when they are removed (the benchmarks' bare side)."""
    from sqlalchemy.engine import result as sa_result

    from txnsafety.sqlalchemy import events, lookups
    was_installed = events._installed
    events._install_mapper_events()
    try:
        for cls, name, *_ in lookups.ONE_ROW_ACCESSORS:
            assert cls.__dict__[name] is lookups._accessors[cls, name]
        events._uninstall_mapper_events()
        for cls, name, *_ in lookups.ONE_ROW_ACCESSORS:
            assert cls.__dict__[name] is lookups._original_accessors[cls, name]
        assert sa_result.ResultInternal._only_one_row is not lookups._only_one_row
    finally:
        if was_installed:
            events._install_mapper_events()


def test_orm_statements_go_through_loading_instances_which_numbers_them(engine):
    """reads.py wraps ``loading.instances`` (looked up on the module at each call) and notes
    each statement's read under ``QueryContext.runid``; SQLAlchemy writes that number on
    every state it populates whole and leaves it on an identity-map hit."""
    import inspect as pyinspect

    from sqlalchemy import inspect
    from sqlalchemy.orm import context as orm_context, loading

    from txnsafety.sqlalchemy import reads
    # SQLAlchemy 2.1 renamed ORMCompileState to _ORMCompileState
    compile_state = getattr(orm_context, "_ORMCompileState", None) or orm_context.ORMCompileState
    assert "loading.instances(" in pyinspect.getsource(compile_state.orm_setup_cursor_result)
    assert "context.runid = _new_runid()" in pyinspect.getsource(reads._original_instances)
    assert loading.instances is reads._instances or loading.instances is reads._original_instances
    seen = []
    original = loading.instances

    def spy(cursor, context):
        result = original(cursor, context)
        seen.append(context.runid)
        return result
    loading.instances = spy
    try:
        with Session(engine) as session:
            first = session.scalars(select(Account).order_by(Account.id)).all()
            again = session.scalars(select(Account).order_by(Account.id)).all()   # identity-map hits
            assert again == first and len(seen) == 2 and seen[0] < seen[1]
            assert {inspect(obj).runid for obj in first} == {seen[0]}               # kept: not repopulated
            session.scalars(select(Account).execution_options(populate_existing=True)).all()
            assert {inspect(obj).runid for obj in first} == {seen[2]}               # repopulated whole
            session.expire(first[0], ["balance"])
            first[0].balance                                                        # a partial refresh
            assert inspect(first[0]).runid == seen[3]
    finally:
        loading.instances = original


def test_load_options_refresh_state_and_compile_options_only_load_props(engine):
    """reads.py tells a refresh of some columns (``_only_load_props``) of one object
    (``load_options._refresh_state``) from a read of the whole row."""
    from sqlalchemy import inspect
    from sqlalchemy.orm import loading
    seen = []
    original = loading.instances

    def spy(cursor, context):
        seen.append((context.load_options._refresh_state, context.compile_state.compile_options._only_load_props))
        return original(cursor, context)
    loading.instances = spy
    try:
        with Session(engine) as session:
            acct = session.get(Account, 1)
            session.expire(acct, ["balance"])
            acct.balance
            session.refresh(acct)
    finally:
        loading.instances = original
    state = inspect(acct)
    assert seen[0] == (None, None)
    assert seen[1][0] is state and set(seen[1][1]) == {"balance"}
    assert seen[2][0] is state and not seen[2][1]


def test_chunked_results_make_objects_per_chunk_and_prebuffered_ones_can_be_read_again(engine):
    """reads.py notes a statement when its first chunk of rows is made into objects
    (``ChunkedIteratorResult.chunks`` / ``.iterator``); with ``prebuffer_rows`` (the asyncio
    extension) they are made inside ``instances()`` and ``chunks(None)`` reads the list again."""
    from sqlalchemy.engine.result import ChunkedIteratorResult
    from sqlalchemy.orm import loading
    results = []
    original = loading.instances

    def spy(cursor, context):
        result = original(cursor, context)
        prebuffered = context.execution_options.get("prebuffer_rows", False)
        results.append((prebuffered, result, list(result.chunks(None)) if prebuffered else None))
        return result
    loading.instances = spy
    try:
        with Session(engine) as session:
            session.scalars(select(Account)).all()
            session.execute(select(Account), execution_options={"prebuffer_rows": True}).all()
    finally:
        loading.instances = original
    (lazy, first, _), (prebuffered, second, chunks) = results
    assert not lazy and prebuffered
    assert isinstance(first, ChunkedIteratorResult) and callable(first.chunks) and hasattr(first, "iterator")
    assert chunks and chunks[0] and isinstance(chunks[0][0], Account)


def test_a_query_context_gets_partials_when_its_first_rows_are_made(engine):
    """reads.root_ended tells a statement whose rows are not made yet by its ``QueryContext``
    lacking ``partials``, which ``loading.instances``' ``chunks`` sets as it starts making
    objects (a slot, unset before: the context is all reads.py keeps until the root ends)."""
    from sqlalchemy.orm import loading
    contexts = []
    original = loading.instances

    def spy(cursor, context):
        contexts.append(context)
        return original(cursor, context)
    loading.instances = spy
    try:
        with Session(engine) as session:
            result = session.execute(select(Account))
            assert not hasattr(contexts[0], "partials")          # executed, no object made yet
            result.scalars().all()
            assert hasattr(contexts[0], "partials")
    finally:
        loading.instances = original


def test_objects_leave_a_session_through_detach_states(engine):
    """detached.py wraps ``InstanceState._detach_states`` (a classmethod), which ``close()``,
    ``expunge()`` and ``expunge_all()`` call with the states leaving."""
    from sqlalchemy import inspect
    from sqlalchemy.orm.state import InstanceState
    from txnsafety.sqlalchemy import detached
    assert isinstance(detached._original_detach, classmethod)
    calls = []
    original = InstanceState.__dict__["_detach_states"]

    def spy(cls, states, session, to_transient=False):
        calls.append(list(states))
        return original.__func__(cls, calls[-1], session, to_transient)
    InstanceState._detach_states = classmethod(spy)
    try:
        session = Session(engine)
        one = session.get(Account, 1)
        session.expunge(one)
        again = session.get(Account, 1)
        session.close()
    finally:
        InstanceState._detach_states = original
    assert one is not again and calls == [[inspect(one)], [inspect(again)]]


def test_the_execution_context_keeps_the_statement_it_runs_beside_the_cached_compiled_one(engine):
    """lookups.py takes a check's keys from ``ExecutionContext.invoked_statement``: on a cache hit
    ``compiled.statement`` is the statement compiled first for that shape, with its values."""
    with Session(engine) as session:
        contexts = [session.execute(select(Account).where(Account.owner == owner)).raw.context
                    for owner in ("first", "second")]
    first, second = contexts
    assert first.compiled is second.compiled                                  # the engine's cache
    assert second.compiled.statement is first.invoked_statement
    assert second.invoked_statement.whereclause.right.effective_value == "second"
    assert second.compiled_parameters[0] == {"owner_1": "second"}


def test_a_state_finds_its_session_in_the_weak_dictionary_of_sessions_data(engine):
    """updates.py finds a flushed object's Session as ``InstanceState.session`` does, in the
    ``WeakValueDictionary`` of Sessions by ``session_id``, through its ``data`` (hash key -> weak
    reference): the property and the dictionary's ``__getitem__`` are two frames a write."""
    from sqlalchemy import inspect
    from sqlalchemy.orm.session import _sessions

    from txnsafety.sqlalchemy import updates
    assert updates._session_refs is _sessions.data
    with Session(engine) as session:
        account = session.get(Account, 1)  # held: the identity map keeps only objects the code keeps
        state = inspect(account)
        assert state.session_id == session.hash_key
        assert _sessions.data[state.session_id]() is session is state.session
    assert _sessions.data.get(state.session_id) is None or _sessions.data[state.session_id]() is None


def test_a_savepoint_names_its_parent_in_parent_s_own_attribute(engine):
    """events.py walks up to the root transaction by ``SessionTransaction._parent``, the ``parent``
    property's attribute (the property is a frame at every transaction begun)."""
    with Session(engine) as session:
        session.get(Account, 1)
        root = session.get_transaction()
        nested = session.begin_nested()
        assert nested._parent is nested.parent is root
        assert root._parent is root.parent is None
        nested.rollback()


def test_the_attribute_equality_of_a_plain_column_is_the_type_s_default_comparison():
    """classes.py compares the values of columns whose ``AttributeImpl.is_equal`` is
    ``TypeEngine.compare_values`` (``x == y``) inline; a type with its own (PickleType) is asked."""
    from sqlalchemy import Column, Integer, PickleType, String
    from sqlalchemy.orm import DeclarativeBase
    from sqlalchemy.sql.type_api import TypeEngine

    from txnsafety.sqlalchemy.classes import ClassInfo

    class Base(DeclarativeBase):
        pass

    class Row(Base):
        __tablename__ = "txn_pin_plain_equality"
        id = Column(Integer, primary_key=True)
        name = Column(String(20))
        blob = Column(PickleType)

    info = ClassInfo(Row)
    assert info.equality["name"].__func__ is TypeEngine.compare_values
    assert info.plain_equality == {"id", "name"}


def test_raw_mapper_listeners_get_three_positional_arguments_and_a_partial_is_kept_as_registered(engine):
    """``checked_hooks.Switch``: ``before_update`` / ``after_insert`` are registered (raw, retval) as
    ``functools.partial`` objects, switched off to ``slice``, which takes at most three positional
    arguments: SQLAlchemy must call the listener itself (no wrapper of its own) with exactly those."""
    import functools

    calls: list[tuple] = []

    def record(*args, **kwargs):
        calls.append((len(args), kwargs))

    listener = functools.partial(record)
    for name in ("before_update", "after_insert"):
        event.listen(Mapper, name, listener, raw=True, retval=True)
    try:
        assert event.contains(Mapper, "before_update", listener)
        with Session(engine) as session:
            session.add(Account(id=900, balance=1))
            session.flush()
            session.get(Account, 900).balance = 2
            session.flush()
            session.rollback()
        listener.__setstate__((slice, (), None, None))     # what Switch.off does: the flush still runs
        with Session(engine) as session:
            session.add(Account(id=901, balance=1))
            session.flush()
            session.rollback()
    finally:
        for name in ("before_update", "after_insert"):
            event.remove(Mapper, name, listener)
    assert calls == [(3, {}), (3, {})]
