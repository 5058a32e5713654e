"""The flush's UPDATEs judged (``MapperEvents.before_update``): the common write in two Python
frames, every other one in full.

A flushed object's write is judged against the read of the statement that loaded it
(:mod:`.reads`), with the columns it sends and those of them computed from the read
(:mod:`.changes`, :mod:`txnsafety.values`, :mod:`txnsafety.provenance`), by the checker's
rules (:func:`txnsafety.checker.write`).  Done by one function per step, that was nine Python
calls and some 600 bytecodes a write, SQLAlchemy's own ``state.dict`` and ``state.session``
properties included: half of what a checked ``session.get()`` request paid the checker
(docs/performance.md, thirteenth round).

Most writes are the same case: a model whose policy the read's transaction alone clears
(:attr:`txnsafety.policies.Policy.quick`), loaded by a plain statement of this request
(nothing left on the object, no FOR UPDATE OF, no read site wanted), columns of plain values
compared by plain ``==``, read and written in one transaction that prevents lost updates, and
the first write of its row in the request.  :func:`before_update` answers that case itself,
with what is fixed per class computed once (:class:`.classes.ClassInfo`, the policy's
``quick``, the provenance cache) and the write remembered inline; the moment any of it does
not hold it hands the write, unchanged, to :func:`judge_update` (the full steps) or, once
the columns are known, to :func:`txnsafety.checker.write`.  Both paths answer every write
the same way: the quick one only skips steps whose answer it already knows.
"""
from __future__ import annotations

import sys
from typing import Any

from sqlalchemy.orm.session import _sessions

from .. import checked_hooks, checker
from ..checked_hooks import OPEN as _open_scopes
from ..config import settings
from ..context import current_scope, current_state, test_code_scope
from ..policies import Protection, cached_policy
from ..provenance import derived_somewhere, known_derivations
from ..report import StompingError
from ..sites import sites_wanted, wants_site
from .changes import changed_columns, from_read
from .classes import classes as _classes, info as _info
from .reads import INFO_KEY, READ_ATTR as _READ_ATTR, newer_read, read_of

#: Frames between the flush's caller and :func:`txnsafety.checker.write`; the sites are
#: found past SQLAlchemy's own frames anyway (library frames are skipped).
WRITE_DEPTH = 3

#: ``InstanceState.session`` is a property that looks ``session_id`` up in SQLAlchemy's
#: ``WeakValueDictionary`` of Sessions: two Python frames a write.  Its ``data`` (hash key ->
#: weak reference) answers the same with none (private; pinned by test).
_session_refs = _sessions.data
_NOTHING = Protection.NOTHING
_NUMBERS = frozenset({int, float})
#: Value types that are never SQL expressions and compare by plain ``==`` (as in changes.py).
_PLAIN_VALUES = frozenset({int, str, float, bool, bytes, type(None)})
_MISSING: Any = object()
#: The last fields of a statement's read (reads.statement_read) the quick path takes: FOR UPDATE
#: in a transaction, no FOR UPDATE OF, no site (a 6-field read left on a state, ``()``: not equal).
_COMMON_TAIL = (False, None, None)


def row_key(state: Any) -> Any:
    """The row's key as the checker names it: the identity's one value, or its tuple."""
    ident = state.key[1] if state.key is not None else state.mapper.primary_key_from_instance(state.obj())
    return ident[0] if len(ident) == 1 else tuple(ident)


def before_update(mapper: Any, connection: Any, state: Any) -> None:
    """``MapperEvents.before_update`` (raw), inside the flush, before the UPDATE.

    Guarded like :func:`txnsafety.checker.guarded`, written out (the decorator's wrapper is
    one call more per flushed object).  A flush with no checked request (one the sample
    leaves out, the checker off) returns here, before any call of its own.
    """
    scope = current_state()[0]
    if scope is None or not settings.enabled:
        if not _open_scopes:  # no checked scope anywhere: the listener is not needed until one opens
            checked_hooks.idle()
        return
    try:
        if not _judged_quickly(state, scope):
            judge_update(state, scope)
    except StompingError:
        raise
    except Exception:
        checker.log.exception("txnsafety: internal error in %s (the request goes on)", "before_update")


def _judged_quickly(state: Any, scope: Any) -> bool:
    """The common write, judged (see the module's docstring); False, having changed nothing,
    when it is not the common case: :func:`judge_update` takes it from the start."""
    committed = state.committed_state  # private (pinned): the attributes set since the load
    if not committed:
        return True  # dirty through a relationship only: no UPDATE of this row's columns
    cls = state.class_
    policy = cached_policy(cls) or checker.write_policy(cls)  # (strict mode's default included)
    if policy is None:
        return True  # not checked
    info = _classes.get(cls) or _info(cls)
    if (not policy.quick
            or ((sites_wanted or settings.read_sites == "always") and wants_site(cls))):
        return False
    ref = _session_refs.get(state.session_id)
    session = ref() if ref is not None else None
    session_state = session.info.get(INFO_KEY) if session is not None else None
    # the read of its statement: this request's, noted by the Session, nothing left on the
    # state, not FOR UPDATE OF, no site (as judge_update takes it)
    noted = session_state.reads.get(state.runid) if session_state is not None else None
    identity, obj = state.key, state.obj()
    if (noted is None or noted[5:] != _COMMON_TAIL or noted[0] is not scope.token or identity is None
            or obj is None or _READ_ATTR in state.__dict__):
        return False
    values, plain, relations = obj.__dict__, info.plain_equality, info.relations  # obj.__dict__: state.dict
    changed: list[str] = []
    derived: list[str] | None = []  # the changed numbers (None: a changed value of another kind)
    for name, loaded in committed.items():  # changes.changed_columns for plain values, inline
        if name in plain:
            value = values.get(name, _MISSING)
            kind = type(value)
            if kind not in _PLAIN_VALUES:
                return False  # a SQL expression, or not set: changed_columns decides
            if (value == loaded) is not True:
                changed.append(name)
                if derived is not None and kind in _NUMBERS and type(loaded) in _NUMBERS and name not in relations:
                    derived.append(name)
                else:
                    derived = None
        elif name in info.equality:
            return False  # a column with its own equality
    if not changed:
        return True
    if derived is None:  # text, dates, flags...: changes.from_read in full
        derived = from_read(values, committed, changed, relations, cls)
    elif derived:  # numbers: those some code derives from themselves (provenance's cache, at once)
        known = known_derivations(cls)
        if known is not None and known[0] == len(sys.modules):
            derived = list(filter(known[1].__contains__, derived))
        else:
            derived = [name for name in derived if derived_somewhere(cls, name)]
    return _write_quickly(scope, obj, cls, policy, info, session_state, noted, identity[1], changed, derived)


def _write_quickly(scope: Any, obj: Any, cls: type, policy: Any, info: Any, session_state: Any,
                   noted: tuple[Any, ...], ident: tuple[Any, ...], changed: list[str], derived: list[str]) -> bool:
    """:func:`txnsafety.checker.write` for the common write: :func:`~txnsafety.judgement.cannot_stomp`
    and the first write of its row remembered, inline, from the statement's read; any other write
    goes to ``checker.write`` with that read taken in first (the only time this path stores it:
    the next ask of it finds the same read through the object, :mod:`.reads`).  False (nothing
    changed) when the object's stamp was replaced since its statement: judged in full."""
    me, stamps = id(obj), scope.stamps
    if stamps:  # (most requests keep none: their reads stay on the objects)
        entry = stamps.get(me)
        if entry is not None and entry[1] >= noted[1]:
            return False  # restamped (a stale lock, an earlier read's site and leases)
    key = ident[0] if len(ident) == 1 else tuple(ident)
    txn, versioned = session_state.txn, info.versioned or not derived
    written = frozenset(derived or changed)  # only blind values: remembered as sent, cannot stomp
    read_txn, stale = noted[2], False
    if (not versioned and session_state.locks and not noted[4] and not (  # _stale_lock's test, inline
            read_txn is not None and txn is not None and read_txn.root_id == txn.root_id
            and txn.prevents_lost_update)):  # (the snapshot is still the transaction's: never stale)
        for lock_tick, classes in session_state.locks:  # a FOR UPDATE of the model since the read
            if lock_tick > noted[1] and issubclass(cls, classes):
                stale = True  # _stale_lock restamps it
                break
    history_key = (cls, key)
    history = scope.writes.get(history_key)
    if history is None and not stale and (
            versioned or policy.versioned_field or policy.protection is _NOTHING
            or (read_txn is not None and txn is not None and read_txn.root_id == txn.root_id
                and (txn.prevents_lost_update or noted[4]))):
        now = scope.last = next(scope._clock)  # checker._remember_write's first write of a row, inline
        scope.writes[history_key] = {me: (now, dict.fromkeys(written, now), None, obj)}
        return True
    stamps[me] = (obj, noted[1], noted[2], noted[3], None, noted[4], False)
    if stale:
        _stale_lock(obj, cls, session_state)
    checker.write(scope, obj, model=cls, policy=policy, key=key, written=written, transaction=txn,
                  versioned=versioned, depth=WRITE_DEPTH + 1, sent=changed if derived else written)
    return True


def judge_update(state: Any, scope: Any) -> None:
    """Every step of a flushed UPDATE's judgement, for the writes :func:`_judged_quickly` leaves."""
    committed = state.committed_state
    if not committed:
        return
    cls = state.class_
    policy = cached_policy(cls)  # checker.write_policy's look-up, inline (no call once cached)
    if policy is None:  # not asked yet, no policy, or strict mode's default
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
    # the read of its statement (reads.py), taken in; the common one (this request's, noted by
    # the Session, nothing left on the state, not FOR UPDATE OF, no site) inline, as read_of
    # and read_for make it
    noted = session_state.reads.get(state.runid) if _READ_ATTR not in state.__dict__ else None
    if (noted is not None and len(noted) == 8 and noted[0] is scope.token and not noted[5]
            and noted[6] is None and noted[7] is None):
        if entry is None or entry[1] < noted[1]:
            entry = scope.stamps[me] = (obj, noted[1], noted[2], noted[3], None, noted[4], False)
    else:
        newer = newer_read(scope, obj, state, entry)
        if newer is not None:
            entry = scope.stamps[me] = newer
    info = _classes.get(cls) or _info(cls)
    changed, atomic = changed_columns(state.dict, committed, info.equality)
    if not changed and not atomic:
        return
    if entry is None:
        _earlier_read(obj, cls, state)
    sent = changed + atomic if atomic else changed  # for the report only
    derived = from_read(state.dict, committed, changed, info.relations, cls)
    key = row_key(state)
    if not derived:
        # only SQL expressions (``n = Model.n + 1``, atomic) and blind values (not computed
        # from the read: see txnsafety.values): cannot stomp (but a re-write of a written-once
        # row, TXN110, is one whoever computes the value); still remembered
        checker.write(scope, obj, model=cls, policy=policy, key=key, written=frozenset(sent),
                      transaction=session_state.txn, versioned=True, depth=WRITE_DEPTH)
        return
    if session_state.locks and not info.versioned:
        _stale_lock(obj, cls, session_state)
    checker.write(scope, obj, model=cls, policy=policy, key=key, written=frozenset(derived),
                  transaction=session_state.txn, versioned=info.versioned, depth=WRITE_DEPTH, sent=sent)


def _earlier_read(obj: Any, cls: type, state: Any) -> None:
    """The object is written in this request but was read in an earlier one (or before
    this request's scope): for this request that read happened outside any of its
    transactions or locks (Khan's cached entity, TXN101 / TXN102)."""
    earlier = read_of(state)
    if earlier is None:
        return  # never loaded under a checker scope: created here, or unknown provenance
    if earlier[0] is not None and test_code_scope(earlier[0]) is not None:
        # Loaded by a test's own code through the Session this request shares with it (a test
        # that pushes an app context, then calls the test client: Flask-SQLAlchemy's Session is
        # the app context's).  No request shares a Session in production: the request's own
        # query returned the object (an identity-map hit, no statement to note), in the
        # Session's transaction of then; the test's read is not the request's.
        checker.record_read(obj, model=cls, key=row_key(state), transaction=earlier[2], site=None)
        return
    checker.record_read(obj, model=cls, key=row_key(state), transaction=None)
    scope = current_scope()
    if scope is not None:  # point the report at the original read, with the locks held then
        checker.restamp(scope, obj, site=earlier[4], leases=earlier[3])


def _stale_lock(obj: Any, cls: type, state: Any) -> None:
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
