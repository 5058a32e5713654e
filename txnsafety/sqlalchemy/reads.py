"""SQLAlchemy reads: one per statement, found through the object's ``InstanceState.runid``.

SQLAlchemy gives every ORM statement a number (``QueryContext.runid``, from one
process-wide counter, set in ``loading.instances``) and writes it on each
``InstanceState`` it populates whole: a new object, ``populate_existing``, a
refresh (``loading._populate_full``).  An identity-map hit that keeps the object's
values keeps its older number, which is the read that counts.  So the checker
needs no per-row hook (an empty ``load`` listener alone cost +5 to +7 % on a
200-row list, SQLAlchemy's own per-row event dispatch):

* per statement (the wrapped ``loading.instances``, in place while a checked scope is open:
  :mod:`txnsafety.checked_hooks`): the read it makes — request
  token, tick, root transaction, leases, FOR UPDATE (and OF which tables), site —
  is noted in the Session's :class:`SessionState` under the statement's ``runid``;
* when the checker asks about an object (a write, ``read_stamp``): its read is the
  one noted under its state's ``runid`` (:func:`read_of`);
* a partial refresh (expired attributes, ``Session.refresh(obj, ["a"])``) moves the
  ``runid`` too, but leaves the other columns as old as before: its number is noted
  with the object's read from before the refresh;
* when objects leave their Session (``close()``, ``expunge()``: the wrapped
  ``InstanceState._detach_states``) their reads are left on the states themselves
  (``_txnsafety_read``, with the ``runid`` they belong to): a copy kept after the
  request (a cache, a module global; pickled, see :func:`on_pickle`) still says
  when, and under what, it was read.

Private SQLAlchemy names used here are pinned by ``tests/sqlalchemy/test_private_api.py``.
"""
from __future__ import annotations

import logging
from functools import partial
from itertools import chain
from typing import Any

from sqlalchemy.orm import loading
from sqlalchemy.orm.base import DEFAULT_STATE_ATTR
from sqlalchemy.orm.state import InstanceState

from .. import check_then_act, checked_hooks, checker
from ..checked_hooks import OPEN as _open_scopes
from ..config import settings
from ..context import current_state
from ..policies import cached_policy, policy_of
from ..report import StompingError
from ..sites import sites_wanted, user_site, wants_site
from .classes import classes, info
from .statements import entity_classes as _entity_classes, locked_tables as _locked_tables

log = logging.getLogger("txnsafety")

#: Key of the checker's per-Session state in ``Session.info``.
INFO_KEY = "txnsafety"
#: On an InstanceState: a read left on the object itself (see the module docstring) ...
READ_ATTR = "_txnsafety_read"
#: ... and the ``runid`` the state had then: the read counts while the state keeps it.
RUNID_ATTR = "_txnsafety_runid"
#: On an InstanceState its Session let go of: that Session's notes (``runid`` -> read), where
#: the state's read is looked up once no Session answers for it (see detached.py).
KEPT_ATTR = "_txnsafety_kept"
#: Where a mapped object keeps its InstanceState (private; pinned by test): a getattr,
#: where ``sqlalchemy.inspect()`` would search the registry by type for every object asked about.
STATE_ATTR = DEFAULT_STATE_ATTR

_MISSING: Any = object()
#: A statement the checker failed to note: its rows have no read (rather than an older one).
_FAILED: tuple[Any, ...] = ("failed",)
#: Stands for "rows of this model" when reporting a FOR UPDATE statement itself.
LOCK_PROBE = object()


# -- per statement ---------------------------------------------------------------------------------

def _instances(cursor: Any, context: Any) -> Any:
    """``loading.instances``: run the statement and note the read it makes under its ``runid``
    at once, in the transaction it runs in.

    A result whose rows are made into objects only after its root transaction ended (a
    result iterated after the commit) was read outside it: :func:`root_ended` finds the
    statements whose rows are not made yet and notes them outside.  Streamed results
    (``yield_per``, server-side cursors), which may be half read when the root ends, and
    FOR UPDATE reads outside a transaction (TXN108, per object) are noted as their first
    rows are made (:func:`_noted_chunks`): a generator put in front of every statement's
    rows cost the SQLAlchemy request about 3 points (docs/performance.md).

    The common statement (no refresh, not FOR UPDATE but a plain read (:func:`_plain_for_update`), not
    streamed, no site wanted) is noted inline as :func:`statement_read` would, sharing the previous one's
    read when nothing ticked since (:func:`_new_window`), else :func:`_instances_noted` (a call: 0.1 point).
    """
    state = current_state()
    if state[0] is None:  # no request, or one the sample leaves out: first, as they pay least then
        if not _open_scopes:  # and no checked scope anywhere: the hook is not needed until one opens
            checked_hooks.idle()
        return _original_instances(cursor, context)
    scope = state[0]
    session = context.session
    session_state = session.info.get(INFO_KEY) if session is not None else None
    if session_state is None or not settings.enabled:
        return _original_instances(cursor, context)  # a Session not instrumented, or the checker off
    if (context.load_options._refresh_state is not None  # private; pinned by test
            or (getattr(context.query, "_for_update_arg", None) is not None and not _plain_for_update(session_state))
            or context.yield_per or sites_wanted or settings.read_sites == "always"):
        return _instances_noted(cursor, context, session_state, scope)
    result = _original_instances(cursor, context)
    if result.dynamic_yield_per:  # a server-side cursor: noted at its first rows
        return _noted(result, session_state, context, None)
    try:  # statement_read's tuple (nothing FOR UPDATE, no site), or the previous statement's
        read = session_state.window  # (None only with window_of None: see SessionState)
        if session_state.window_of is not state or read[1] != scope.last:
            read = _new_window(session_state, scope, state)
        if context.execution_options.get("prebuffer_rows", False):
            # its objects are made already (AsyncSession's results): a refresh among them noted the
            # statement's read itself (on_refresh), which stays; nothing is left to track
            session_state.reads.setdefault(context.runid, read)
            return result
        session_state.reads[context.runid] = read
    except Exception:  # (free on CPython 3.11+ until raised)
        _failed(session_state, context)
        return result
    if session_state.txn is not None:  # _track, inline
        last = session_state.last
        session_state.last = context
        if last is not None and not hasattr(last, "partials"):
            _keep(session_state, last)
    return result


def _new_window(session_state: Any, scope: Any, state: tuple[Any, ...]) -> tuple[Any, ...]:
    """A new shared read for the common statements: something ticked since the last one, or the
    context's state tuple (request, leases: ``window_of``, one identity test) or the transaction
    changed.  Two reads sharing a tick cannot be told apart by anything ticks order reads against
    (docs/performance.md, eighth round)."""
    now = scope.last = next(scope._clock)
    session_state.window_of = state
    read = session_state.window = (scope.token, now, session_state.txn, state[2], False, False, None, None)
    return read


def _plain_for_update(session_state: Any) -> bool:
    """A FOR UPDATE statement that is a plain read: a dialect that renders none (SQLite), in a
    transaction (outside one it is TXN108).  :func:`note_lock` notes no lock for it and
    :func:`statement_read` says not FOR UPDATE: it is noted as a common statement is."""
    return session_state.ignores_for_update and session_state.txn is not None


def _instances_noted(cursor: Any, context: Any, session_state: Any, scope: Any) -> Any:
    """A statement off the common path: a refresh (its object's read before it is kept, for a
    partial one), a FOR UPDATE statement (its row lock noted before its rows are made), a
    streamed one, or one whose read site is wanted."""
    refreshed = None
    refresh_state = context.load_options._refresh_state
    if refresh_state is not None:
        try:  # before the refresh gives the state a new runid
            refreshed = (refresh_state, read_of(refresh_state))
        except Exception:
            log.exception("txnsafety: internal error while reading a refreshed object's read")
    if getattr(context.query, "_for_update_arg", None) is not None:
        try:  # before its rows are made: an object it does not refresh was read before the lock
            note_lock(session_state, context, scope)
        except StompingError:
            raise
        except Exception:
            log.exception("txnsafety: internal error while noting a FOR UPDATE statement (the request goes on)")
    return _noted(_original_instances(cursor, context), session_state, context, refreshed)


def note_lock(session_state: Any, context: Any, scope: Any) -> None:
    """A FOR UPDATE statement of the Session's root transaction: note the row lock it takes.

    A later write of an object of its classes read *before* it, and not refreshed by it
    (an identity-map hit keeps the old values), is stale-locked (TXN112); a check after
    it is serialized (TXN105).  On an AUTOCOMMIT connection the statement itself is TXN108.

    Noted here, where every ORM statement passes anyway, and not in an engine-level
    ``ConnectionEvents.before_execute`` listener: any engine listener puts SQLAlchemy's
    every statement on its slower evented path, which cost the PostgreSQL request about
    four points by itself (docs/performance.md, fifth round).
    """
    if session_state.root is None or session_state.ignores_for_update:
        return  # SQLite renders no FOR UPDATE: no lock (rows loaded FOR UPDATE still report TXN108)
    classes = _entity_classes(context)
    if session_state.txn is None:  # AUTOCOMMIT: the lock ends with the statement (TXN108)
        for cls in classes:
            checker.record_read(LOCK_PROBE, model=cls, transaction=None, for_update=True)
            checker.forget(LOCK_PROBE)
        return
    if classes:
        session_state.locks.append((scope.tick(), classes))
        check_then_act.note_row_lock(scope, session_state.txn)


def _noted(result: Any, session_state: Any, context: Any, refreshed: Any) -> Any:
    """Note the read of a statement off the common path (see :func:`_instances`)."""
    if context.execution_options.get("prebuffer_rows", False):
        if _note(session_state, context, refreshed):  # the objects are made already: a list, read again
            for rows in result.chunks(None):
                _report_rows_locked_outside(rows, context.runid)
    elif context.yield_per or result.dynamic_yield_per:  # streamed: noted at its first rows
        _defer_note(result, session_state, context, refreshed)
    elif _note(session_state, context, refreshed):  # FOR UPDATE outside a transaction: report per object
        result.chunks = partial(_noted_chunks, result.chunks, session_state, context, None, [False, True])
        result.iterator = chain.from_iterable(result.chunks(None))
    elif session_state.txn is not None:
        _track(session_state, context)
    return result


def _track(session_state: Any, context: Any) -> None:
    """Keep the statement's context until its root ends, if its rows may be made after that
    (see :func:`root_ended`): only the ``QueryContext``, never the result.

    Nearly every result is made into objects before the next statement runs (``get()``,
    ``.all()``): the last context waits in one slot, and goes to the list only if its rows
    are not made when the next statement comes (one context held, not every statement's).
    """
    last = session_state.last
    session_state.last = context
    if last is not None and not hasattr(last, "partials"):
        _keep(session_state, last)


def _keep(session_state: Any, context: Any) -> None:
    """``context``'s rows were not made before the next statement: keep it until the root ends."""
    unfetched = session_state.unfetched
    unfetched.append(context)
    if len(unfetched) > 64:  # a long transaction: keep only the statements not read yet
        unfetched[:] = [c for c in unfetched if not hasattr(c, "partials")]


def _defer_note(result: Any, session_state: Any, context: Any, refreshed: Any) -> None:
    """Note the statement's read when its first rows are made into objects (chunks are made
    on demand: ``ChunkedIteratorResult.chunks``, private; pinned by test)."""
    result.chunks = partial(_noted_chunks, result.chunks, session_state, context, refreshed, [True])
    result.iterator = chain.from_iterable(result.chunks(None))


def _noted_chunks(chunks: Any, session_state: Any, context: Any, refreshed: Any, pending: list[Any],
                  size: Any) -> Any:
    if pending[0]:  # the first rows are about to be made (a refresh event may ask for the read)
        pending[0] = False
        pending.append(_note(session_state, context, refreshed))
    for rows in chunks(size):
        if pending[-1] is True:
            _report_rows_locked_outside(rows, context.runid)
        yield rows


def root_ended(session_state: Any) -> None:
    """The Session's root transaction ended: a statement of it whose rows are not made into
    objects yet (a result iterated after the commit) is read outside it.

    Only the statements' ``QueryContext`` objects are kept until then, not their results:
    holding a result (or its cursor) for the transaction's length cost a one-row read
    more than the note saves.  A context gets ``partials`` when its first chunk of rows
    is made (``loading.instances``' ``chunks``; private, pinned by test).
    """
    unfetched, last = session_state.unfetched, session_state.last
    if last is None:
        return
    if not unfetched and hasattr(last, "partials"):  # the common end: every statement's rows made
        session_state.last = None
        return
    session_state.unfetched, session_state.last = [], None
    if unfetched:
        unfetched.append(last)
    else:
        unfetched = [last]
    reads = session_state.reads
    scope = current_state()[0]
    last = scope.last if scope is not None else None
    now = None
    for context in unfetched:
        if not hasattr(context, "partials"):
            noted = reads.get(context.runid)
            if noted is not None and len(noted) == 8:
                # no transaction, and no row lock (it ended with the root).  A statement sharing an
                # earlier one's tick (_instances) is read after it: a tick of its own, when nothing
                # ticked since (a write since must stay after its values, which its SELECT read before)
                if scope is not None and noted[0] is scope.token and noted[1] == last:
                    if now is None:
                        now = scope.last = next(scope._clock)
                    reads[context.runid] = (noted[0], now, None, noted[3], False) + noted[5:]
                else:
                    reads[context.runid] = noted[:2] + (None, noted[3], False) + noted[5:]


def _note(session_state: Any, context: Any, refreshed: tuple[Any, Any] | None) -> bool:
    """Note the statement's read; True when it read rows FOR UPDATE with no transaction (TXN108)."""
    try:
        scope, _, leases = current_state()
        if scope is None:
            return False
        reads = session_state.reads
        runid = context.runid  # private; pinned by test
        noted = reads.get(runid)
        if noted is not None:  # by a refresh event of its rows already (see on_refresh)
            return len(noted) == 8 and bool(noted[5])
        if refreshed is not None:
            state, before = refreshed
            only = context.compile_state.compile_options._only_load_props  # private; pinned by test
            if only is not None and not (classes.get(state.class_) or info(state.class_)).loaded_columns <= set(only):
                reads[runid] = before or ()  # partial: the other columns are as old as before
                return False
        statement = reads[runid] = statement_read(context, session_state, scope, leases)
        return bool(statement[5])
    except StompingError:
        raise
    except Exception:
        _failed(session_state, context)
        return False


def _failed(session_state: Any, context: Any) -> None:
    """A read not noted: its rows get none, never the one before it (a re-read object's)."""
    session_state.reads[context.runid] = _FAILED
    log.exception("txnsafety: internal error while noting a SQLAlchemy read (the request goes on)")


_original_instances = loading.instances


def statement_read(context: Any, session_state: Any, scope: Any, leases: tuple[Any, ...]) -> tuple[Any, ...]:
    """What is true of every row of the statement: ``(request token, tick, transaction, leases,
    FOR UPDATE, FOR UPDATE with no transaction (TXN108), the tables FOR UPDATE OF names,
    site)``."""
    txn = session_state.txn
    for_update_arg = getattr(context.query, "_for_update_arg", None)  # private; pinned by test
    for_update = for_update_arg is not None
    locked_outside = for_update and txn is None
    entities = _entity_classes(context) if sites_wanted or settings.read_sites == "always" else None
    site = user_site(3) if entities and any(wants_site(cls) for cls in entities) else None
    now = scope.last = next(scope._clock)
    return (scope.token, now, txn, leases,
            for_update and not session_state.ignores_for_update,  # SQLite renders no FOR UPDATE
            locked_outside, None if for_update_arg is None else _locked_tables(for_update_arg), site)


def _report_rows_locked_outside(rows: list[Any], runid: int) -> None:
    """TXN108 for each object the statement loaded FOR UPDATE with no transaction (``record_read``
    reports it whatever the model's policy); an identity-map hit it did not load is not."""
    for row in rows:
        for obj in row if type(row) is tuple else (row,):
            state = getattr(obj, STATE_ATTR, None)
            if state is not None and getattr(state, "runid", None) == runid and state.key is not None:
                ident = state.key[1]
                checker.record_read(obj, model=state.class_, key=ident[0] if len(ident) == 1 else tuple(ident),
                                    transaction=None, for_update=True)


def read_for(statement: tuple[Any, ...], cls: type) -> tuple[Any, ...] | None:
    """The read rows of ``cls`` got from ``statement``: ``(request token, tick, transaction,
    leases, site, for_update)``, a :class:`~txnsafety.checker.ReadStamp` without the entity
    and with the request's token first; None when ``cls`` is not checked."""
    token, tick, txn, leases, for_update, locked_outside, of, site = statement
    policy = cached_policy(cls, _MISSING)
    if policy is _MISSING:
        policy = policy_of(cls)
    if policy is None and not settings.strict:
        return None
    if site is not None and not wants_site(cls):
        site = None
    if locked_outside:
        return (token, tick, None, leases, site, True)
    if for_update and of is not None:
        # FOR UPDATE OF ...: only the rows of the tables named are locked (a joined eager
        # load of another class is read, not locked)
        for_update = not of.isdisjoint((classes.get(cls) or info(cls)).tables)
    return (token, tick, txn, leases, site, for_update)


# -- per object, when asked -------------------------------------------------------------------------

def read_of(state: Any) -> tuple[Any, ...] | None:
    """The read that counts for the object of ``state``, or None (never read under a scope).

    The read left on the state, while the state keeps the ``runid`` it was left for;
    else the read its Session noted under the state's ``runid`` (the Session it is in, or
    the one that let it go).
    """
    own = getattr(state, READ_ATTR, None)
    if type(own) is not tuple or len(own) not in (6, 8):
        own = None  # also anything that answers every attribute (a mock) is no ORM object
    runid = getattr(state, "runid", None)
    if own is not None and (runid is None or getattr(state, RUNID_ATTR, _MISSING) == runid):
        return read_for(own, state.class_) if len(own) == 8 else own
    if runid is None:
        return own
    session = state.session if isinstance(state, InstanceState) else None
    session_state = session.info.get(INFO_KEY) if session is not None else None
    entry = session_state.reads.get(runid) if session_state is not None else None
    if entry is None:  # the notes of the Session that let it go (detached.py)
        kept = state.__dict__.get(KEPT_ATTR) if isinstance(state, InstanceState) else None
        entry = kept.get(runid) if kept is not None else None
        if entry is None:
            return own  # loaded by a statement nobody noted (no scope, checker off): as before
    if len(entry) == 8:
        return read_for(entry, state.class_)
    return entry if len(entry) == 6 else None


def leave_read(state: Any, read: tuple[Any, ...] | None) -> None:
    """Leave ``read`` on the state itself, for the values it holds now."""
    setattr(state, READ_ATTR, read)
    setattr(state, RUNID_ATTR, getattr(state, "runid", None))


def newer_read(scope: Any, entity: Any, state: Any, entry: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
    """The stamp tuple of the object's read when it is ``scope``'s and newer than ``entry``
    (the entity's stamp so far), else None."""
    read = read_of(state)
    if read is None or read[0] is not scope.token or (entry is not None and entry[1] >= read[1]):
        return None
    return (entity, read[1], read[2], read[3], read[4], read[5], False)


class InstanceReads:
    """The reads of mapped objects, for the checker (a :class:`txnsafety.checker.DeferredReads`
    source).  A read belongs to the request whose token it carries; a read of an earlier
    request stays too (its leases and site name the original read when the object is
    written in a later request)."""

    def take(self, scope: Any, entity: Any, entry: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
        state = getattr(entity, STATE_ATTR, None)
        return newer_read(scope, entity, state, entry) if state is not None else None

    def drop(self, scope: Any, entity: Any) -> None:
        state = getattr(entity, STATE_ATTR, None)
        read = read_of(state) if state is not None else None
        if read is not None and read[0] is scope.token:
            leave_read(state, (None,) + read[1:])  # not this request's any more; kept for a later one


instance_reads = InstanceReads()


# -- refreshes ------------------------------------------------------------------------------------

def on_refresh(state: Any, context: Any, attrs: Any) -> None:
    """``InstanceEvents.refresh``: an object already in the Session got values from a statement.

    Fires only for objects refreshed (never for first loads: no per-row cost on a plain
    list).  Needed where SQLAlchemy keeps the object's ``runid``: a query that fills the
    expired attributes of an object in the identity map (``_populate_partial``).  A refresh
    of every column leaves the statement's read on the object; a partial one leaves the
    older read, which the other columns still hold.
    """
    if context is None or not settings.enabled:
        return
    try:
        if attrs is not None and not (classes.get(state.class_) or info(state.class_)).loaded_columns <= attrs:
            return
        session = context.session
        session_state = session.info.get(INFO_KEY) if session is not None else None
        if session_state is None:
            return
        entry = session_state.reads.get(context.runid)
        if entry is None:
            _note(session_state, context, None)  # rows made before the statement was noted (prebuffer_rows)
            entry = session_state.reads.get(context.runid)
        if entry is not None:
            leave_read(state, entry)
    except StompingError:
        raise
    except Exception:
        log.exception("txnsafety: internal error while noting a SQLAlchemy refresh (the request goes on)")


# -- install ------------------------------------------------------------------------------------------

#: ``loading.instances`` is this module's hook only while a checked scope is open (checked_hooks.py).
_swap = checked_hooks.AttributeSwap(loading, "instances", _instances, _original_instances)


def install() -> None:
    checked_hooks.register(_swap)
    checker.add_deferred_reads(instance_reads)


def uninstall() -> None:
    checked_hooks.unregister(_swap)
    checker.remove_deferred_reads(instance_reads)
