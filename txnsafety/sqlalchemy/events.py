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
* **Reads.**  One per statement, found through the object's ``InstanceState.runid``
  (see :mod:`.reads`): no per-row listener.  The checker takes an object's read into
  the request's stamps when it is asked about the object (a write, ``read_stamp``):
  most loaded rows are never written.
* **Identity-map trap.**  A ``FOR UPDATE`` re-read (``with_for_update()``,
  ``Session.get(..., with_for_update=True)``) of an object already in the Session
  locks the row but does not refresh the object.  The FOR UPDATE statements of a
  root transaction are noted where every ORM statement passes (the wrapped
  ``loading.instances``, :func:`.reads.note_lock`); no engine listener
  (``before_execute`` put every statement on SQLAlchemy's slower evented path:
  about four points of the PostgreSQL request) and no ``do_orm_execute`` (SQLAlchemy
  would prepare every ORM statement twice).  A write of an object read *before*
  such a statement of its model, and not refreshed by it, is stale-locked (TXN112)
  unless the transaction's snapshot makes it current anyway.  On an AUTOCOMMIT
  connection the statement itself is TXN108.
* **Writes.**  ``MapperEvents.before_update`` (inside the flush, with the
  connection) judges the write with the changed columns (:mod:`.updates`: the common
  write in two Python frames, any other by :func:`txnsafety.checker.write`).  A
  column assigned a SQL expression (``obj.n = Model.n + 1``) is atomic in the
  database and not a read-modify-write; a mapper with ``version_id_col`` writes
  conditionally (``versioned=True``).  ``after_insert`` records creations.  Bulk
  ``update()`` / ``delete()`` statements have no per-object events and are never
  reported.

Mapper-level listeners are installed once, for all mappers; they do nothing for a
Session that was not instrumented, and for a class without a policy they return
after one dictionary look-up (unless ``strict``).  ``before_update``, ``after_insert``
and the wrapped ``loading.instances`` are in place only while a checked scope is open
in the process (:mod:`txnsafety.checked_hooks`): a request the sample leaves out, once
no checked one is open, makes no Python call for them.
"""
from __future__ import annotations

import dataclasses
import threading
import weakref
from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import Mapper, Session, scoped_session, sessionmaker

from .. import checked_hooks, checker
from ..config import settings
from ..context import Transaction, current_state, left_out_scope, root_transaction
from ..policies import Policy
from ..report import StompingError
from . import detached, reads
from .isolation import IGNORES_FOR_UPDATE, Verdict, verdict_for
from .detached import on_pickle, on_unpickle
from .reads import INFO_KEY, on_refresh
from .updates import WRITE_DEPTH, before_update, row_key

__all__ = ["instrument", "is_instrumented", "transaction_of"]


_MARK = "_txnsafety_instrumented"
_CONN_KEY = "_txnsafety_session_state"


class SessionState:
    """What the checker tracks for one Session (kept in ``session.info``)."""

    __slots__ = ("root", "txn", "autocommit", "ignores_for_update", "locks", "reads", "unfetched", "last",
                 "window", "window_of", "__weakref__")

    def __init__(self, root: Any = None) -> None:
        #: The root SessionTransaction this state describes, until it ends.
        self.root: Any = root
        self.txn: Transaction | None = None   # its checker identity (None: no transaction)
        self.autocommit = False
        self.ignores_for_update = False
        #: (tick, entity classes) of each FOR UPDATE statement of this root transaction.
        self.locks: list[tuple[int, tuple[type, ...]]] = []
        #: runid -> the read of that statement (see reads.py), for the Session's lifetime:
        #: its objects keep their runid across transactions (and requests, if it lives on).
        self.reads: dict[int, tuple[Any, ...]] = {}
        #: Results of this root transaction noted at once, whose rows may not be made yet
        #: (see reads.root_ended).
        self.unfetched: list[Any] = []
        #: The context of the root's last statement noted at once (see reads._track).
        self.last: Any = None
        #: The read tuple of the last common statement, which the next one shares when
        #: nothing has ticked since (see reads._instances).
        self.window: tuple[Any, ...] | None = None
        #: The context's state tuple (request, transactions, leases) ``window`` was made in: the
        #: next statement shares the window only in the same one (see reads._new_window); None
        #: whenever ``window`` is (and to drop the window: a new transaction).
        self.window_of: Any = None

    def start(self, root: Any) -> None:
        self.root, self.txn, self.autocommit, self.ignores_for_update = root, None, False, False
        self.locks, self.window, self.window_of = [], None, None

    def join(self, verdict: Verdict) -> None:
        """A connection began in the current root: fold its verdict in (weakest wins)."""
        if verdict.dialect in IGNORES_FOR_UPDATE:
            self.ignores_for_update = True
        if not verdict.transactional:
            self.autocommit, self.txn, self.window_of = True, None, None
            return
        if self.autocommit:
            return
        self.window_of = None  # a new or weaker transaction: the next statement's read names it
        if self.txn is None:
            self.txn = root_transaction(verdict.isolation, verdict.prevents_lost_update, verdict.database,
                                        "sqlalchemy")
        elif self.txn.prevents_lost_update and not verdict.prevents_lost_update:
            self.txn = dataclasses.replace(self.txn, isolation=verdict.isolation, prevents_lost_update=False)


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
        reads.root_ended(state)
        state.start(None)


def _after_begin(session: Session, transaction: Any, connection: Any) -> None:
    """``SessionEvents.after_begin``: a connection joined a transaction of the Session.

    No read or write reaches the database without a connection, so the first
    ``after_begin`` of a root transaction is where its identity starts (a savepoint
    joins its root): no ``after_transaction_create`` listener, which SQLAlchemy
    would call for every flush's subtransaction too.

    Switched off (``ENABLED`` false), nothing is checked: the Session's state is dropped
    rather than kept up to date (the isolation verdict and a transaction identity cost an
    installed-but-off list request one to two points).  Switched on again in the middle of
    a transaction, that transaction goes unchecked (no state: no read noted, no write
    judged); the next one is checked.  A state kept stale instead would name an ended
    transaction.  In a request the sample leaves out (``sample_rate``) nothing is noted
    either, but a state the Session has (a long-lived Session's notes of the objects it read
    in checked requests) is left as it is: that request's hooks all return at its missing
    scope, and the next checked transaction starts the state again.
    """
    if not settings.enabled:
        session.info.pop(INFO_KEY, None)
        return
    if current_state()[0] is None and left_out_scope() is not None:
        return  # a request the sample leaves out runs as if the checker were off (its notes stay)
    root = transaction
    while root._parent is not None:  # a savepoint (SAVEPOINT on the root's connection); ``parent``'s
        root = root._parent          # own attribute (private; pinned by test): the property is a frame
    state = session.info.get(INFO_KEY)
    if state is None:
        state = session.info[INFO_KEY] = SessionState(root)
    elif state.root is not root:
        state.start(root)
    try:
        verdict = verdict_for(connection)
    except Exception:  # never break the application's transaction
        checker.log.exception("txnsafety: could not determine the isolation of %r", connection)
        verdict = Verdict(True, "unknown", False, connection.dialect.name, "")
    state.join(verdict)
    # Core checks (lookups.py) are seen on the connection: tell this Connection (one checkout,
    # not the pooled DBAPI connection, which other code reuses later) whose transaction it runs.
    connection.__dict__[_CONN_KEY] = weakref.ref(state)


# -- Mapper events (installed once, for every mapper) ----------------------------------

def _after_insert(mapper: Any, connection: Any, state: Any) -> None:
    """``MapperEvents.after_insert`` (raw), guarded as :func:`.updates.before_update` is: an insert
    with no checked request (left out by the sample, the checker off) returns here."""
    scope = current_state()[0]
    if scope is None or not settings.enabled:
        if not checked_hooks.OPEN:  # no checked scope anywhere: not needed until one opens
            checked_hooks.idle()
        return
    try:
        _judge_insert(scope, state)
    except StompingError:
        raise
    except Exception:
        checker.log.exception("txnsafety: internal error in %s (the request goes on)", "_after_insert")


def _judge_insert(scope: Any, state: Any) -> None:
    checked = _checked_write(scope, state)
    if checked is not None:
        session_state, cls, policy = checked
        if scope.lookups:  # an insert after a check of this request? (TXN105)
            for hook in _INSERT_HOOKS:
                hook(scope, state, cls, session_state.txn, row_key(state))
        checker.write(scope, state.obj(), model=cls, policy=policy, key=row_key(state), written=None,
                      transaction=session_state.txn, created=True, depth=WRITE_DEPTH)


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
#: ``before_update`` and ``after_insert`` do nothing without a checked scope: each is registered as a
#: :class:`~txnsafety.checked_hooks.Switch`, which calls it only while a checked scope is open (a left-out
#: request's flush makes no Python call for them).
BEFORE_UPDATE = checked_hooks.Switch(before_update)
AFTER_INSERT = checked_hooks.Switch(_after_insert)
_MAPPER_EVENTS: tuple[tuple[str, Any, dict[str, bool]], ...] = (
    ("before_update", BEFORE_UPDATE.listener, {"raw": True, "retval": True}),
    ("after_insert", AFTER_INSERT.listener, {"raw": True, "retval": True}),
    ("refresh", on_refresh, {"raw": True}),  # refreshed objects only: no cost on first loads
    ("pickle", on_pickle, {"raw": True}),
    ("unpickle", on_unpickle, {"raw": True}),
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
        checked_hooks.register(BEFORE_UPDATE)
        checked_hooks.register(AFTER_INSERT)
        reads.install()
        detached.install()
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
        checked_hooks.unregister(BEFORE_UPDATE)
        checked_hooks.unregister(AFTER_INSERT)
        reads.uninstall()
        detached.uninstall()
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
