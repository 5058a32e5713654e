"""SQLAlchemy 2.x integration: Session events feed the checker.

``instrument(target)`` listens on a ``Session``, ``sessionmaker``,
``scoped_session``, ``AsyncSession``, ``async_sessionmaker`` or a Flask-SQLAlchemy
extension.  What happens then:

* **Transactions.**  Every *root* ``SessionTransaction`` gets its own
  :class:`txnsafety.Transaction`, minted when its first connection begins
  (``after_begin``: nothing reaches the database without a connection; the
  isolation verdict comes from that connection, :mod:`.isolation`) and dropped
  when it ends (``after_transaction_end``).  Savepoints and the internal
  subtransactions of a flush share the root.  A root that runs on an
  ``AUTOCOMMIT`` connection is **no transaction** (``None``): its reads and
  writes are outside any transaction (TXN101/TXN102, TXN108 for FOR UPDATE).
* **Reads.**  ``InstanceEvents.load`` (first load of a row) and ``refresh``
  (expired attributes, ``populate_existing``, ``Session.refresh``; only a refresh
  of every column re-stamps the object, a partial one leaves older values in it)
  leave the read on the row's ``InstanceState``: one tuple per statement (its tick,
  the root's transaction, the leases held, whether it was ``FOR UPDATE``), shared
  by its rows.  The checker takes it into the request's stamps when it is asked
  about the object (a write, ``read_stamp``): most loaded rows are never written.
* **Identity-map trap.**  A ``FOR UPDATE`` re-read (``with_for_update()``,
  ``Session.get(..., with_for_update=True)``) of an object already in the Session
  locks the row but does not refresh the object.  The FOR UPDATE statements of a
  root transaction are noted on the connection (``ConnectionEvents.before_execute``,
  one attribute look-up per statement; ``do_orm_execute`` would make SQLAlchemy
  prepare every ORM statement twice); a write of an object read *before* such a
  statement of its model, and not refreshed by it, is stale-locked (TXN112)
  unless the transaction's snapshot makes it current anyway.  On an AUTOCOMMIT
  connection the statement itself is TXN108.
* **Writes.**  ``MapperEvents.before_update`` (inside the flush, with the
  connection) calls :func:`txnsafety.record_write` with the changed columns.  A
  column assigned a SQL expression (``obj.n = Model.n + 1``) is atomic in the
  database and not a read-modify-write; a mapper with ``version_id_col`` writes
  conditionally (``versioned=True``).  ``after_insert`` records creations.  Bulk
  ``update()`` / ``delete()`` statements have no per-object events and are never
  reported.

Mapper-level listeners are installed once, for all mappers; they do nothing for a
Session that was not instrumented, and for a class without a policy they return
after one dictionary look-up (unless ``strict``).
"""
from __future__ import annotations

import dataclasses
import threading
import weakref
from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import Mapper, Session, scoped_session, sessionmaker
from sqlalchemy.orm.base import DEFAULT_STATE_ATTR, NEVER_SET, NO_VALUE
from sqlalchemy.sql.elements import ClauseElement

from .. import check_then_act, checker
from ..config import settings
from ..context import Transaction, current_scope, current_state, new_transaction
from ..policies import Policy, cached_policy, policy_of
from ..report import StompingError
from ..sites import sites_wanted, user_site, wants_site
from ..values import NOT_LOADED, looks_derived
from .isolation import IGNORES_FOR_UPDATE, Verdict, verdict_for

__all__ = ["instrument", "is_instrumented", "transaction_of"]


#: Key of our per-Session state in ``Session.info``.
INFO_KEY = "txnsafety"
_MARK = "_txnsafety_instrumented"
_CONN_KEY = "_txnsafety_session_state"
#: On the InstanceState: the last read (see _read_for), kept across requests.
_READ_ATTR = "_txnsafety_read"


class SessionState:
    """What the checker tracks for one Session (kept in ``session.info``)."""

    __slots__ = ("root", "txn", "autocommit", "ignores_for_update", "locks", "__weakref__")

    def __init__(self) -> None:
        #: The root SessionTransaction this state describes, until it ends.
        self.root: Any = None
        self.txn: Transaction | None = None   # its checker identity (None: no transaction)
        self.autocommit = False
        self.ignores_for_update = False
        #: (tick, entity classes) of each FOR UPDATE statement of this root transaction.
        self.locks: list[tuple[int, tuple[type, ...]]] = []

    def start(self, root: Any) -> None:
        self.root, self.txn, self.autocommit, self.ignores_for_update = root, None, False, False
        self.locks = []

    def join(self, verdict: Verdict) -> None:
        """A connection began in the current root: fold its verdict in (weakest wins)."""
        if verdict.dialect in IGNORES_FOR_UPDATE:
            self.ignores_for_update = True
        if not verdict.transactional:
            self.autocommit, self.txn = True, None
            return
        if self.autocommit:
            return
        if self.txn is None:
            self.txn = new_transaction(isolation=verdict.isolation,
                                       prevents_lost_update=verdict.prevents_lost_update,
                                       database=verdict.database, label="sqlalchemy")
        elif self.txn.prevents_lost_update and not verdict.prevents_lost_update:
            self.txn = dataclasses.replace(self.txn, isolation=verdict.isolation, prevents_lost_update=False)


# -- per-class facts, computed once ------------------------------------------------

class _ClassInfo:
    __slots__ = ("versioned", "columns", "loaded_columns", "equality", "relations", "tables")

    def __init__(self, cls: type) -> None:
        from sqlalchemy import inspect
        mapper = inspect(cls)
        self.versioned = mapper.version_id_col is not None
        self.columns = tuple(prop.key for prop in mapper.column_attrs)
        self.loaded_columns = frozenset(prop.key for prop in mapper.column_attrs if not prop.deferred)
        #: column key -> the attribute's own equality: what the flush compares a set value
        #: with the loaded one by (``AttributeImpl.is_equal``, private; pinned by test).
        self.equality = {key: mapper.class_manager[key].impl.is_equal for key in self.columns}
        #: foreign-key columns: assigning one points at another row, it is not arithmetic
        self.relations = frozenset(prop.key for prop in mapper.column_attrs
                                   if any(column.foreign_keys for column in prop.columns))
        #: the tables of the class (a FOR UPDATE OF names tables)
        self.tables = frozenset(mapper.tables)


_classes: dict[type, _ClassInfo] = {}


def _info(cls: type) -> _ClassInfo:
    info = _classes.get(cls)
    if info is None:
        info = _classes[cls] = _ClassInfo(cls)
    return info


def _forget_classes() -> None:
    """Drop cached class facts (policies declared after first use; tests)."""
    _classes.clear()


def _key(state: Any) -> Any:
    ident = state.key[1] if state.key is not None else state.mapper.primary_key_from_instance(state.obj())
    return ident[0] if len(ident) == 1 else tuple(ident)


def _state_of(session: Session | None) -> SessionState | None:
    if session is None:
        return None
    return session.info.get(INFO_KEY)


# -- Session events ------------------------------------------------------------------

def _after_transaction_end(session: Session, transaction: Any) -> None:
    """The root ended: statements whose first row is turned into an object from now on
    (a result iterated after the commit) count as read outside it, and the Session lets
    go of it (no reference cycle through the ended root)."""
    state = session.info.get(INFO_KEY)
    if state is not None and state.root is transaction:
        state.start(None)


def _after_begin(session: Session, transaction: Any, connection: Any) -> None:
    """``SessionEvents.after_begin``: a connection joined a transaction of the Session.

    No read or write reaches the database without a connection, so the first
    ``after_begin`` of a root transaction is where its identity starts (a savepoint
    joins its root): no ``after_transaction_create`` listener, which SQLAlchemy
    would call for every flush's subtransaction too.
    """
    state = session.info.get(INFO_KEY)
    if state is None:
        state = session.info[INFO_KEY] = SessionState()
    root = transaction
    while root.parent is not None:  # a savepoint (SAVEPOINT on the root's connection)
        root = root.parent
    if state.root is not root:
        state.start(root)
    try:
        verdict = verdict_for(connection)
    except Exception:  # never break the application's transaction
        checker.log.exception("txnsafety: could not determine the isolation of %r", connection)
        verdict = Verdict(True, "unknown", False, connection.dialect.name, "")
    state.join(verdict)
    # FOR UPDATE statements (engine event, below) and Core checks (lookups.py) are seen on the
    # connection: tell this Connection (one checkout, not the pooled DBAPI connection, which
    # other code reuses later) whose transaction it runs.
    connection.__dict__[_CONN_KEY] = weakref.ref(state)
    engine = connection.engine
    if not engine.__dict__.get(_MARK):
        # Dialects that render no FOR UPDATE (SQLite) take no row locks: nothing to note
        # there, and no engine event to pay for (TXN108 still comes from the rows loaded).
        if verdict.dialect not in IGNORES_FOR_UPDATE:
            event.listen(engine, "before_execute", _before_execute, retval=True)
        engine.__dict__[_MARK] = True


def _before_execute(conn: Any, clauseelement: Any, multiparams: Any, params: Any,
                    execution_options: Any) -> tuple[Any, Any, Any]:
    """``ConnectionEvents.before_execute``: note the FOR UPDATE statements of a Session.

    Why here and not in ``SessionEvents.do_orm_execute``: any ``do_orm_execute``
    listener makes SQLAlchemy prepare every ORM statement twice.  This costs one
    call and one attribute look-up per statement (``retval=True`` spares
    SQLAlchemy's wrapper call; statement and parameters go through unchanged).
    """
    if getattr(clauseelement, "_for_update_arg", None) is not None:  # private; pinned by test_private_api.py
        _note_lock(conn, clauseelement)
    return clauseelement, multiparams, params


def _note_lock(conn: Any, clauseelement: Any) -> None:
    ref = conn.__dict__.get(_CONN_KEY)
    state = ref() if ref is not None else None
    scope = current_scope()
    if state is None or state.root is None or scope is None or not settings.enabled:
        return
    try:
        classes = tuple(d["entity"] for d in clauseelement.column_descriptions
                        if isinstance(d.get("entity"), type))
    except Exception:  # a Core select without ORM entities
        classes = ()
    if state.txn is None:  # AUTOCOMMIT: the lock ends with the statement (TXN108)
        for cls in classes:
            checker.record_read(_LOCK_PROBE, model=cls, transaction=None, for_update=True)
            checker.forget(_LOCK_PROBE)
        return
    if classes and not state.ignores_for_update:
        state.locks.append((scope.tick(), classes))
        check_then_act.note_row_lock(scope, state.txn)  # a check after it is serialized (TXN105)


#: Stands for "rows of this model" when reporting a FOR UPDATE statement itself.
_LOCK_PROBE = object()


def _earlier_read(obj: Any, cls: type, state: Any) -> None:
    """The object is written in this request but was read in an earlier one (or before
    this request's scope): for this request that read happened outside any of its
    transactions or locks (Khan's cached entity, TXN101 / TXN102)."""
    earlier = _read_on(state)
    if earlier is None:
        return  # never loaded under a checker scope: created here, or unknown provenance
    checker.record_read(obj, model=cls, key=_key(state), transaction=None)
    scope = current_scope()
    if scope is not None:  # point the report at the original read, with the locks held then
        checker.restamp(scope, obj, site=earlier[4], leases=earlier[3])


def _stale_lock(obj: Any, cls: type, state: SessionState) -> None:
    """Before a write: was the row re-read FOR UPDATE without refreshing ``obj``?

    A FOR UPDATE statement of the object's model ran after the object was read and
    neither loaded nor refreshed it (either the identity map kept it, or the
    statement locked other rows of the model: both leave the write unprotected).
    """
    stamp = checker.read_stamp(obj)
    if stamp is None or stamp.for_update:
        return
    txn = state.txn
    for tick, classes in state.locks:
        if tick > stamp.tick and issubclass(cls, classes):
            read_txn = stamp.transaction
            same_root = txn is not None and read_txn is not None and read_txn.root_id == txn.root_id
            if same_root and txn.prevents_lost_update:
                return  # the object's snapshot is still the transaction's: not stale
            scope = current_scope()
            if scope is not None:
                # the object kept the values read before (and, in its own transaction,
                # the row is locked by now)
                checker.restamp(scope, obj, stale_lock=True, for_update=same_root)
            return


# -- Mapper / instance events (installed once, for every mapper) ----------------------

def _on_load(state: Any, context: Any) -> None:
    """``InstanceEvents.load`` (raw: ``state`` is the InstanceState).

    Runs for every row of every ORM query, so a row costs one look-up and one
    attribute: the read its statement made on its first row (:func:`_begin_statement`,
    kept in the statement's own ``QueryContext.attributes``) is left on the row's
    ``InstanceState``, and taken into the request's stamps only when the checker
    asks about the object (a write, ``read_stamp``; see :class:`InstanceReads`).
    Most loaded rows are never written.  The rare case (a FOR UPDATE read outside
    any transaction: TXN108) goes through ``record_read``, which reports it.  Never
    raises into the query (but a violation in raise mode).
    """
    if context is None:
        return  # Session.merge() loads with no query context
    try:
        reads = context.attributes.get(_READS_KEY)  # private (QueryContext); pinned by test
        cls = state.class_
        if reads is None:
            read = _begin_statement(context, cls)
        elif reads is _UNCHECKED:
            return  # a Session not instrumented, outside a request, or the checker is off
        elif reads is _FAILED:
            vars(state).pop(_READ_ATTR, None)  # re-read now, but not known how: no older read stays
            return
        elif reads[0] is cls:
            read = reads[1]
        else:
            read = _read_of_class(reads, cls)
        if read is None:
            return  # a class without a policy
        if read is _LOCKED_OUTSIDE:
            _locked_outside_transaction(state, cls)
            return
        # An attribute of our own, not ``state.info``: that memoized dict costs a Python call and
        # a new dict per row (InstanceState keeps a ``__dict__`` slot; pinned by a test).
        state._txnsafety_read = read
    except StompingError:
        raise
    except Exception:
        vars(state).pop(_READ_ATTR, None)
        checker.log.exception("txnsafety: internal error while stamping a SQLAlchemy read (the request goes on)")


#: Key of a statement's reads in its ``QueryContext.attributes``: ``[first row's class,
#: its read, {other class: read} or None, statement facts]``; ``_UNCHECKED`` (no request,
#: a Session not instrumented); ``_FAILED`` (an internal error: its rows lose any older read,
#: which a refresh just replaced, rather than keep one that is no longer true).
_READS_KEY = ("txnsafety", "reads")
_UNCHECKED: Any = ()
_FAILED: Any = ("failed",)


def _begin_statement(context: Any, cls: type) -> Any:
    """The first row of a statement: what is true for all of its rows, kept with the
    statement (its rows may be made into objects later, after other statements ran:
    ``yield_per``, a result iterated afterwards; they were read by this one); returns
    the read of the first row's class (see :func:`_read_for`).

    One tick for the statement (its rows were read at once), the root transaction,
    the leases held and whether it is FOR UPDATE.  Most statements load one class;
    the read of any other is made on its first row (:func:`_read_of_class`).
    """
    attributes = context.attributes
    attributes[_READS_KEY] = _FAILED  # until it is known
    session = context.session
    session_state = session.info.get(INFO_KEY) if session is not None else None
    scope, _, leases = current_state()
    if session_state is None or scope is None or not settings.enabled:
        attributes[_READS_KEY] = _UNCHECKED
        return None
    txn = session_state.txn
    for_update_arg = getattr(context.query, "_for_update_arg", None)  # private; pinned by test
    for_update = for_update_arg is not None
    statement = (scope.token, next(scope._clock), txn, leases,
                 for_update and not session_state.ignores_for_update,  # SQLite renders no FOR UPDATE
                 for_update and txn is None,  # TXN108, whatever the policy
                 None if for_update_arg is None else _locked_tables(for_update_arg))
    read = _read_for(statement, cls)
    attributes[_READS_KEY] = [cls, read, None, statement]
    return read


def _read_of_class(reads: list[Any], cls: type) -> Any:
    """The read of a statement's second (third...) class: joined eager loads."""
    others = reads[2]
    if others is None:
        others = reads[2] = {}
    read = others.get(cls, _MISSING)
    if read is _MISSING:
        read = others[cls] = _read_for(reads[3], cls)
    return read


def _read_for(statement: tuple[Any, ...], cls: type) -> Any:
    """The read tuple rows of ``cls`` get from ``statement`` (shared, immutable):
    ``(request token, tick, transaction, leases, site, for_update)``, a :class:`ReadStamp`
    without the entity and with the request's token first; None when ``cls`` is not
    checked; ``_LOCKED_OUTSIDE`` for TXN108."""
    token, tick, txn, leases, for_update, locked_outside, of = statement
    if locked_outside:
        return _LOCKED_OUTSIDE
    policy = cached_policy(cls, _MISSING)
    if policy is _MISSING:
        policy = policy_of(cls)
    if policy is None and not settings.strict:
        return None
    if for_update and of is not None:
        # FOR UPDATE OF ...: only the rows of the tables named are locked (a joined eager
        # load of another class is read, not locked)
        for_update = not of.isdisjoint((_classes.get(cls) or _info(cls)).tables)
    site = user_site(2) if (sites_wanted or settings.read_sites == "always") and wants_site(cls) else None
    return (token, tick, txn, leases, site, for_update)


def _locked_tables(for_update_arg: Any) -> frozenset[Any] | None:
    """The tables a ``FOR UPDATE OF`` names (None: no OF, every table of the FROM is locked)."""
    of = getattr(for_update_arg, "of", None) if for_update_arg is not None else None
    if not of:
        return None
    tables = set()
    for element in of:
        table = getattr(element, "table", None)  # a column: its table
        tables.add(element if table is None else table)
        for parent in getattr(element, "_cloned_set", ()) or ():  # an alias of a table
            tables.add(parent)
    return frozenset(tables)


#: A statement's read of rows FOR UPDATE with no transaction (each row goes to record_read).
_LOCKED_OUTSIDE: Any = object()


def _locked_outside_transaction(state: Any, cls: type) -> None:
    """A row read FOR UPDATE with no transaction to hold the lock: ``record_read``
    reports TXN108 and stamps it (when the class is checked) like any read."""
    obj = state.obj()
    checker.record_read(obj, model=cls, key=_key(state), transaction=None, for_update=True)
    made = checker.read_stamp(obj)
    scope = current_scope()
    if made is not None and scope is not None:
        state._txnsafety_read = (scope.token, made.tick, made.transaction, made.leases, made.site, made.for_update)


class InstanceReads:
    """The reads :func:`_on_load` left on ``InstanceState`` objects, for the checker
    (a :class:`txnsafety.checker.DeferredReads` source).

    A read belongs to the request whose token it carries; a read of an earlier
    request stays on the object too (its leases and site name the original read when
    the object is written in a later request: see :func:`_earlier_read`).
    """

    def take(self, scope: Any, entity: Any, entry: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
        state = getattr(entity, _STATE_ATTR, None)
        return _newer_read(scope, entity, state, entry) if state is not None else None

    def drop(self, scope: Any, entity: Any) -> None:
        state = getattr(entity, _STATE_ATTR, None)
        read = _read_on(state) if state is not None else None
        if read is not None and read[0] is scope.token:
            state._txnsafety_read = (None,) + read[1:]  # not this request's any more; kept for a later one


def _newer_read(scope: Any, entity: Any, state: Any, entry: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
    """The stamp tuple of the read left on ``state`` when it is ``scope``'s and newer than
    ``entry`` (the entity's stamp so far), else None."""
    read = _read_on(state)
    if read is None or read[0] is not scope.token or (entry is not None and entry[1] >= read[1]):
        return None
    return (entity, read[1], read[2], read[3], read[4], read[5], False)


def _read_on(state: Any) -> tuple[Any, ...] | None:
    """The read left on ``state``, or None (also for anything that is not one: an object
    that answers every attribute, such as a mock, is not an ORM object)."""
    read = getattr(state, _READ_ATTR, None)
    return read if type(read) is tuple and len(read) == 6 else None


#: Where a mapped object keeps its InstanceState (private; pinned by test): a getattr,
#: where ``sqlalchemy.inspect()`` would search the registry by type for every object asked about.
_STATE_ATTR = DEFAULT_STATE_ATTR
_instance_reads = InstanceReads()


def _on_pickle(state: Any, state_dict: dict[str, Any]) -> None:
    """``InstanceEvents.pickle``: carry the read's mark into a pickled object.

    A cache that pickles entities (dogpile.cache, Redis) is where Khan's cached
    entity lives; ``InstanceState.__getstate__`` keeps ``info`` but not our own
    attribute.  The leases are dropped: a lease is not the later request's, and
    need not pickle; the site (plain strings and a number) is kept for the report.
    """
    read = _read_on(state)
    if read is not None:
        state_dict[_READ_ATTR] = _pickled_read(read[4])


def _pickled_read(site: Any) -> tuple[Any, ...]:
    """What a read becomes in a pickle: no request, tick, transaction or lease; its site."""
    return _PICKLED_READ if site is None else (None, 0, None, (), site, False)


_PICKLED_READ: tuple[Any, ...] = (None, 0, None, (), None, False)


def _on_unpickle(state: Any, state_dict: dict[str, Any]) -> None:
    """``InstanceEvents.unpickle``: restore the mark :func:`_on_pickle` carried."""
    read = state_dict.get(_READ_ATTR)
    if type(read) is tuple and len(read) == 2:  # pickled by txnsafety 0.x before deferred reads: (leases, site)
        read = _pickled_read(read[1])
    if type(read) is tuple and len(read) == 6:
        setattr(state, _READ_ATTR, read)


_MISSING: Any = object()


def _on_refresh(state: Any, context: Any, attrs: Any) -> None:
    if attrs is not None:
        info = _classes.get(state.class_) or _info(state.class_)
        if not info.loaded_columns <= attrs:
            return  # a partial refresh: the other columns still hold the older read
    _on_load(state, context)


def _before_update(mapper: Any, connection: Any, state: Any) -> None:
    """``MapperEvents.before_update`` (raw), inside the flush, before the UPDATE.

    Guarded like :func:`txnsafety.checker.guarded`, written out: it runs for every
    flushed object, and the decorator's wrapper is one more call each time.
    """
    try:
        _judge_update(state)
    except StompingError:
        raise
    except Exception:
        checker.log.exception("txnsafety: internal error in %s (the request goes on)", "_before_update")


def _judge_update(state: Any) -> None:
    scope = current_state()[0]
    if scope is None or not settings.enabled:
        return
    committed = state.committed_state  # private (pinned): the attributes set since the load
    if not committed:
        return  # dirty through a relationship only: no UPDATE of this row's columns
    cls = state.class_
    policy = checker.write_policy(cls)
    if policy is None:
        return
    session = state.session
    session_state = session.info.get(INFO_KEY) if session is not None else None
    if session_state is None:
        return
    obj = state.obj()
    me = id(obj)
    entry = scope.stamps.get(me)
    newer = _newer_read(scope, obj, state, entry)  # the read _on_load left on the state, taken in
    if newer is not None:
        entry = scope.stamps[me] = newer
    info = _classes.get(cls) or _info(cls)
    changed, atomic = _changed_columns(state.dict, committed, info.equality)
    if not changed and not atomic:
        return
    if entry is None:
        _earlier_read(obj, cls, state)
    sent = changed + atomic if atomic else changed  # for the report only
    derived = _from_read(state.dict, committed, changed, info.relations)
    if not derived:
        # only SQL expressions (``n = Model.n + 1``, atomic) and blind values (not computed
        # from the read: see txnsafety.values): cannot stomp (but a re-write of a written-once
        # row, TXN110, is one whoever computes the value); still remembered
        checker.write(scope, obj, model=cls, policy=policy, key=_key(state), written=frozenset(sent),
                      transaction=session_state.txn, versioned=True, depth=_WRITE_DEPTH)
        return
    if session_state.locks and not info.versioned:
        _stale_lock(obj, cls, session_state)
    checker.write(scope, obj, model=cls, policy=policy, key=_key(state), written=frozenset(derived),
                  transaction=session_state.txn, versioned=info.versioned, depth=_WRITE_DEPTH, sent=sent)


def _from_read(values: dict[str, Any], committed: dict[str, Any], changed: list[str],
               relations: frozenset[str]) -> list[str]:
    """The changed columns whose new value may be computed from the loaded one
    (``committed`` holds what was loaded; ``NO_VALUE`` when the column never was)."""
    derived = []
    for key in changed:
        value, loaded = values.get(key), committed.get(key, NO_VALUE)
        if type(value) in _NUMBERS and type(loaded) in _NUMBERS and key not in relations:
            derived.append(key)  # the common case, arithmetic on a number: no call
        elif looks_derived(value, _loaded(loaded), relation=key in relations):
            derived.append(key)
    return derived


_NUMBERS = frozenset({int, float})


def _loaded(value: Any) -> Any:
    return NOT_LOADED if value is NO_VALUE or value is NEVER_SET else value


def _changed_columns(values: dict[str, Any], committed: dict[str, Any],
                     equality: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The columns the coming UPDATE sends: (set to a value, set to a SQL expression).

    The flush's own test (``persistence._collect_update_commands``): a column set
    since the load is sent unless the attribute's equality says it is back to the
    loaded value; an expression (``Model.n + 1``) is computed by the database.
    Only the attributes set since the load are looked at (``committed`` holds
    their loaded values), usually one or two; relationships are not columns.
    """
    changed: list[str] = []
    atomic: list[str] = []
    for key, loaded in committed.items():
        is_equal = equality.get(key)
        if is_equal is None:
            continue  # a relationship or another non-column attribute
        value = values.get(key, _MISSING)
        if type(value) in _PLAIN_VALUES:
            if is_equal(value, loaded) is not True:
                changed.append(key)
        elif hasattr(value, "__clause_element__") or isinstance(value, ClauseElement):
            atomic.append(key)
        elif value is _MISSING or is_equal(value, loaded) is not True:
            changed.append(key)
    return changed, atomic


#: Value types that are never SQL expressions: no need to ask (most columns hold one).
_PLAIN_VALUES = frozenset({int, str, float, bool, bytes, type(None)})


#: Frames between the flush's caller and :func:`txnsafety.checker.write`; the sites are
#: found past SQLAlchemy's own frames anyway (library frames are skipped).
_WRITE_DEPTH = 3


@checker.guarded
def _after_insert(mapper: Any, connection: Any, state: Any) -> None:
    scope = current_state()[0]
    checked = _checked_write(scope, state)
    if checked is not None:
        session_state, cls, policy = checked
        if scope.lookups:  # an insert after a check of this request? (TXN105)
            for hook in _INSERT_HOOKS:
                hook(scope, state, cls, session_state.txn, _key(state))
        checker.write(scope, state.obj(), model=cls, policy=policy, key=_key(state), written=None,
                      transaction=session_state.txn, created=True, depth=_WRITE_DEPTH)


def _checked_write(scope: Any, state: Any) -> tuple[SessionState, type, Policy] | None:
    """The session's state, the class and its policy (``STRICT_DEFAULT`` in strict mode
    when it has none) when this write is to be judged (a request is open, the class is
    checked, the session is instrumented), else None: the flush pays one look-up."""
    if scope is None or not settings.enabled:
        return None
    cls = state.class_
    policy = checker.write_policy(cls)
    if policy is None:
        return None
    session_state = _state_of(state.session)
    return None if session_state is None else (session_state, cls, policy)


_SESSION_EVENTS = (
    ("after_begin", _after_begin),
    ("after_transaction_end", _after_transaction_end),
)
#: (event, listener, listen() keywords).  The MapperEvents take ``retval=True``: without
#: it SQLAlchemy wraps the listener in a Python function that returns EXT_CONTINUE, one
#: more call per flushed object; the return value of these events is ignored anyway.
_MAPPER_EVENTS: tuple[tuple[str, Any, dict[str, bool]], ...] = (
    ("load", _on_load, {"raw": True}),
    ("refresh", _on_refresh, {"raw": True}),
    ("before_update", _before_update, {"raw": True, "retval": True}),
    ("after_insert", _after_insert, {"raw": True, "retval": True}),
    ("pickle", _on_pickle, {"raw": True}),
    ("unpickle", _on_unpickle, {"raw": True}),
)
_install_lock = threading.Lock()
_installed = False
#: (install, uninstall) of the patches other modules of the integration add (merge.py,
#: lookups.py), installed and removed with the mapper listeners.
_PATCHES: list[tuple[Any, Any]] = []
#: Called for each insert when the request made checks: ``(scope, state, class, txn, key)``.
_INSERT_HOOKS: list[Any] = []


def _install_mapper_events() -> None:
    global _installed
    with _install_lock:
        if _installed:
            return
        for name, fn, kw in _MAPPER_EVENTS:
            event.listen(Mapper, name, fn, **kw)
        checker.add_deferred_reads(_instance_reads)
        for install, _ in _PATCHES:
            install()
        _installed = True


def _uninstall_mapper_events() -> None:
    """Remove the mapper-level listeners (the benchmark's "without txnsafety" side)."""
    global _installed
    with _install_lock:
        if not _installed:
            return
        for name, fn, _kw in _MAPPER_EVENTS:
            event.remove(Mapper, name, fn)
        checker.remove_deferred_reads(_instance_reads)
        for _, uninstall in _PATCHES:
            uninstall()
        _installed = False


# -- the public call ----------------------------------------------------------------

def _event_target(target: Any) -> Any:
    """What to attach Session events to, for each kind of thing we accept."""
    try:
        from sqlalchemy.ext.asyncio import AsyncSession, async_scoped_session, async_sessionmaker
    except ImportError:  # pragma: no cover - asyncio extension always ships with SQLAlchemy 2
        AsyncSession = async_scoped_session = async_sessionmaker = ()  # type: ignore[assignment,misc]

    if isinstance(target, (Session, sessionmaker, scoped_session)):
        return target
    if isinstance(target, type) and issubclass(target, Session):
        return target
    if AsyncSession and isinstance(target, AsyncSession):
        return target.sync_session
    if AsyncSession and isinstance(target, async_scoped_session):
        target = target.session_factory
    if AsyncSession and isinstance(target, async_sessionmaker):
        # The sync Session class is shared by default: give this factory its own
        # subclass so that instrumenting it does not instrument every Session.
        base = target.kw.get("sync_session_class") or target.class_.sync_session_class
        if not getattr(base, "_txnsafety_private", False):
            base = type(f"Instrumented{base.__name__}", (base,), {"_txnsafety_private": True})
            target.configure(sync_session_class=base)
        return base
    if AsyncSession and isinstance(target, type) and issubclass(target, AsyncSession):
        return target.sync_session_class
    session = getattr(target, "session", None)  # Flask-SQLAlchemy's SQLAlchemy() extension
    if isinstance(session, scoped_session):
        return session
    raise TypeError(
        "txnsafety.sqlalchemy.instrument() takes a Session, sessionmaker, scoped_session, AsyncSession, "
        f"async_sessionmaker or a Flask-SQLAlchemy extension, not {target!r}")


def instrument(target: Any) -> Any:
    """Check every read and write of Sessions made from ``target``; returns ``target``.

    Idempotent.  Instrument before the Session is used: a transaction already
    open when a Session instance is instrumented is adopted as it is.
    """
    _install_mapper_events()
    where = _event_target(target)
    marked = _session_class_or_instance(where)
    # Our own mark, not event.contains(): SQLAlchemy's listener registry is keyed by
    # id(target), and the per-factory Session subclasses of dead sessionmakers are
    # garbage-collected, so a new factory's class can reuse an id and look instrumented.
    if getattr(marked, _MARK, False):
        return target  # already instrumented (or a subclass of an instrumented class)
    for name, fn in _SESSION_EVENTS:
        event.listen(where, name, fn)
    setattr(marked, _MARK, True)
    if isinstance(where, Session) and where.in_transaction() and INFO_KEY not in where.info:
        state = where.info[INFO_KEY] = SessionState()
        state.start(where.get_transaction())
        state.join(verdict_for(where.connection()))
    return target


def _session_class_or_instance(where: Any) -> Any:
    if isinstance(where, scoped_session):
        where = where.session_factory
    if isinstance(where, sessionmaker):
        where = where.class_
    return where


def is_instrumented(session: Any) -> bool:
    """True when ``session`` (a Session or AsyncSession) is checked by txnsafety."""
    sync = getattr(session, "sync_session", session)
    return bool(getattr(sync, _MARK, False))


def transaction_of(session: Any) -> Transaction | None:
    """The checker's identity of ``session``'s current root transaction (None: none, or AUTOCOMMIT)."""
    sync = getattr(session, "sync_session", session)
    state = sync.info.get(INFO_KEY)
    return state.txn if state is not None else None
