"""Per-request state of the checker, kept in :mod:`contextvars`.

Why contextvars: a WSGI server runs each request in its own thread, an ASGI server
in its own task, and ``asgiref`` copies the context across ``sync_to_async`` /
``async_to_sync`` hops.  A context variable follows the request through all of
them, and a task spawned inside a request sees the request it was spawned in.

Three things are tracked:

* the **request scope** (:class:`RequestScope`): a mutable object shared by every
  thread hop and child task of one request; it holds the read stamps, the per-key
  write history, the violations reported so far and cleanup callbacks;
* the **transaction stack**: an immutable tuple of :class:`Transaction` objects,
  so a child task gets a snapshot and cannot pop its parent's transaction;
* the **leases held**: an immutable tuple of lock leases (anything that satisfies
  :class:`LeaseLike`), pushed by the lock service when it acquires a lock.
"""
from __future__ import annotations

import contextvars
import enum
import itertools
import logging
import threading
import uuid
from contextlib import ContextDecorator, contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Protocol, runtime_checkable

from .checked_hooks import scope_closed, scope_opened

log = logging.getLogger("txnsafety")

_request_ids = itertools.count(1)
#: Request ids are "<random per process>-<counter>": unique across processes, and
#: cheaper than a uuid per request.
_PROCESS_TAG = uuid.uuid4().hex[:8]
_transaction_ids = itertools.count(1)


class Priority(str, enum.Enum):
    """Who is waiting for a lock: a person (interactive) or a job (batch)."""

    INTERACTIVE = "interactive"
    BATCH = "batch"


@runtime_checkable
class LeaseLike(Protocol):
    """What the checker needs to know about a lock lease.

    The lock service's ``Lease`` implements it; any other lock can too.
    ``key`` is the lock id as the application named it (what a model's lock-id
    function returns, converted with ``str``).
    """

    key: str
    token: str
    fence: int

    def is_live(self) -> bool:
        """True while the lease is held and its deadline has not passed."""

    @property
    def verified(self) -> bool:
        """False when the backend failed open and nothing really holds the lock."""


@dataclass(frozen=True)
class Transaction:
    """One root transaction (or savepoint) as the checker sees it.

    ``prevents_lost_update`` is the isolation verdict the integration computed:
    True for SERIALIZABLE, PostgreSQL REPEATABLE READ, SQLite and App Engine,
    False for READ COMMITTED and MySQL REPEATABLE READ.  ``root_id`` is the id of
    the outermost transaction: a savepoint is still the same transaction for
    stomping purposes.
    """

    id: int
    root_id: int
    isolation: str = "serializable"
    prevents_lost_update: bool = True
    database: str = "default"
    label: str = ""

    @property
    def is_savepoint(self) -> bool:
        return self.id != self.root_id


_new_object = object.__new__


def _make_transaction(tid: int, root_id: int, isolation: str, prevents_lost_update: bool,
                      database: str, label: str) -> Transaction:
    """``Transaction(...)`` for the hot path: one is minted per request.

    A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``;
    filling the instance's ``__dict__`` at once costs a quarter of that and makes the
    same object (equality, hash and repr read the same fields).
    """
    txn = _new_object(Transaction)
    txn.__dict__.update(id=tid, root_id=root_id, isolation=isolation,
                        prevents_lost_update=prevents_lost_update, database=database, label=label)
    return txn


def new_transaction(
    *,
    isolation: str = "serializable",
    prevents_lost_update: bool = True,
    database: str = "default",
    label: str = "",
    parent: Transaction | None = None,
) -> Transaction:
    """Mint a transaction identity; a child of ``parent`` shares its root."""
    tid = next(_transaction_ids)
    if parent is not None:
        return _make_transaction(tid, parent.root_id, parent.isolation, parent.prevents_lost_update,
                                 parent.database, label or parent.label)
    return _make_transaction(tid, tid, isolation, prevents_lost_update, database, label)


def root_transaction(isolation: str, prevents_lost_update: bool, database: str, label: str) -> Transaction:
    """:func:`new_transaction` of a root, positional and in one frame: an integration mints one
    for every transaction a checked request begins (:func:`_make_transaction`'s body, inline)."""
    tid = next(_transaction_ids)
    txn = _new_object(Transaction)
    txn.__dict__.update(id=tid, root_id=tid, isolation=isolation, prevents_lost_update=prevents_lost_update,
                        database=database, label=label)
    return txn


class RequestScope:
    """Everything the checker remembers about one request (or job, or test).

    Created by the middleware, the pytest plugin or :func:`request_scope`; dropped
    whole when the request ends, so nothing leaks into the next one.

    ``priority`` may be given as a function that decides it: it is then called the
    first time the priority is asked for (by a lock), because most requests take
    no lock and deciding costs more than the rest of opening the scope.
    """

    __slots__ = ("name", "_priority", "_id", "stamps", "writes", "violations", "reported", "_cleanups", "_clock",
                 "last", "shared_read", "token", "lookups", "locked_roots", "__weakref__")

    #: Guards the few shared lists and sets below.  One for all scopes: the sections are
    #: a few instructions long and rare (a lock taken, a violation), a lock per request is not.
    _lock = threading.Lock()

    def __init__(self, name: str = "", priority: Priority | Callable[[], Priority] = Priority.INTERACTIVE,
                 id: str | None = None) -> None:
        self.name = name
        self._priority: Priority | Callable[[], Priority] = priority
        self._id: int | str = id if id is not None else next(_request_ids)  # made text when asked for
        #: id(entity) -> the read's entry (see :mod:`txnsafety.checker`); the entry's
        #: strong reference to the entity keeps ids unique.
        self.stamps: dict[int, tuple[Any, ...]] = {}
        #: (model class, key) -> {id(entity): (tick, {field or None: tick}, site, entity) of that object's writes}.
        self.writes: dict[tuple[type, Any], dict[int, tuple[Any, ...]]] = {}
        self.violations: list[Any] = []
        self.reported: set[tuple[Any, ...]] = set()
        self._cleanups: list[Callable[[], None]] = []
        self._clock: Iterator[int] = itertools.count(1)
        #: The last tick taken (every ``next(_clock)`` stores it here; -1 after a stamp was
        #: replaced): a statement's read made when nothing has ticked since the previous one's
        #: may share that one's tick and tuple.  Threads running one request's reads and writes
        #: at the same moment (not asgiref's hops, which run one at a time) may, rarely, store
        #: an older tick after a newer one: a read then shares a tick it should not, and is
        #: ordered before a write another thread made at that moment.
        self.last = 0
        #: The last statement read an integration left for the next statement to share (see
        #: :func:`txnsafety.django.reads._stamp_rows`); None until the first.
        self.shared_read: Any = None
        #: This request's identity in what integrations keep outside the scope (a read
        #: left on an ORM object: see ``checker.DeferredReads``): compared with ``is``, it
        #: cannot be mistaken for a later request's, and holding it keeps nothing alive.
        self.token = object()
        #: model -> the empty lookups of this request not yet acted on (TXN105, see
        #: :mod:`txnsafety.check_then_act`); None until the first one (most requests make none).
        self.lookups: dict[type, list[tuple[Any, ...]]] | None = None
        #: root ids of this request's transactions that took a row lock (FOR UPDATE): a check
        #: made after one is serialized with other such transactions.  None until the first.
        self.locked_roots: set[int] | None = None

    def __repr__(self) -> str:
        return f"RequestScope(name={self.name!r}, id={self.id!r})"

    @property
    def id(self) -> str:
        """``"<random per process>-<counter>"``: unique across processes (in reports and lock owners)."""
        number = self._id
        return number if isinstance(number, str) else f"{_PROCESS_TAG}-{number}"

    @property
    def priority(self) -> Priority:
        """Interactive or batch: whose lock requests come first (see the lock service)."""
        priority = self._priority
        if not isinstance(priority, Priority):
            priority = self._priority = priority()
        return priority

    @priority.setter
    def priority(self, value: Priority) -> None:
        self._priority = value

    def close_cleanups(self) -> None:
        """Run the cleanups registered so far, last first, and forget them.  Never raises."""
        with self._lock:
            cleanups, self._cleanups = self._cleanups, []
        for fn in reversed(cleanups):
            try:
                fn()
            except Exception:  # a cleanup must not break the request
                log.exception("txnsafety: cleanup failed at end of request %s", self.id)

    def tick(self) -> int:
        """A per-request logical clock: orders reads and writes across hops."""
        now = self.last = next(self._clock)
        return now

    def add_cleanup(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` when the scope closes (e.g. release a lock still held)."""
        with self._lock:
            self._cleanups.append(fn)

    def discard_cleanup(self, fn: Callable[[], None]) -> None:
        with self._lock:
            try:
                self._cleanups.remove(fn)
            except ValueError:
                pass

    def close(self) -> None:
        """Run cleanups (last first) and drop all state.  Never raises."""
        if self._cleanups:  # most requests register none: skip the lock
            self.close_cleanups()
        self.stamps.clear()
        self.writes.clear()
        self.reported.clear()
        self.lookups = self.locked_roots = self.shared_read = None


class LeftOutScope(RequestScope):
    """The scope of a request the sample leaves out (``sample_rate``): what its locks use of
    it (name, priority, id, cleanups) and nothing else.

    The checker never sees it (:func:`current_scope` is None there: see
    :func:`open_left_out`), so it keeps no stamps, writes or reports: nine requests in
    ten at ``sample_rate`` 0.1 are left out, and the containers a checked scope starts
    with (six objects) and their clearing at the end were most of what opening and closing
    one cost.  Only a lock reads it (:func:`request_of_locks`).
    """

    __slots__ = ()      # made only by :func:`open_left_out`, which sets its four attributes

    def close(self) -> None:
        """Run cleanups (last first: a lock still held is released).  Never raises."""
        if self._cleanups:
            self.close_cleanups()


#: What one context sees: ``(request scope, transaction stack, leases held)``.  One
#: immutable value in one context variable, because every checked read needs all three:
#: one look-up instead of three on the hottest path.  A plain tuple, always unpacked
#: by name where it is read, because a named one costs several times as much to build.
_State = tuple  # (RequestScope | None, tuple[Transaction, ...], tuple[LeaseLike, ...])
_EMPTY: _State = (None, (), ())
_state: contextvars.ContextVar[_State] = contextvars.ContextVar("txnsafety_state", default=_EMPTY)

#: ``current_state() -> (request scope | None, transaction stack, leases held)``: the one
#: look-up the hot paths make (every statement, every write).  The context variable's own
#: ``get``, bound once here: calling a module-level name costs no Python frame, where
#: ``module._state.get()`` would build a bound method at every call.
current_state: Callable[[], _State] = _state.get


def current_scope() -> RequestScope | None:
    """The request scope in force, or None outside any request (or in one left unchecked)."""
    scope, _, _ = _state.get()
    return scope


#: The scope of a request the checker leaves out (``sample_rate``): none of the checker's
#: hooks see it (``current_scope()`` is None there), but its locks still take their
#: priority, owner and end-of-request release from it.
_unchecked: contextvars.ContextVar[RequestScope | None] = contextvars.ContextVar(
    "txnsafety_unchecked_scope", default=None)


#: ``left_out_scope() -> the scope of the request the sample left out, or None`` (in a checked
#: request, or outside any: None).  The context variable's own ``get``, bound once: an
#: integration's per-transaction hook asks it with no Python frame.
left_out_scope: Callable[[], RequestScope | None] = _unchecked.get


def request_of_locks() -> RequestScope | None:
    """The request a lock belongs to: the checked one, or one the checker left out."""
    scope, _, _ = _state.get()
    return scope if scope is not None else _unchecked.get()


class UncheckedToken:
    """What :func:`open_left_out` replaced (``state``, ``unchecked``: the two context variables'
    tokens), for :func:`close_scope`; never changed.  A plain class with slots, its attributes set
    by :func:`open_left_out` (one is made for every request the sample leaves out)."""

    __slots__ = ("state", "unchecked")


def open_left_out(name: str, priority: Priority | Callable[[], Priority]) -> tuple[LeftOutScope, UncheckedToken]:
    """A ``LeftOutScope(name, priority)`` made the current request for locks only (the checker sees
    none), in one frame: nine requests in ten at ``sample_rate`` 0.1 open one."""
    scope = _new_object(LeftOutScope)
    scope.name, scope._priority, scope._id, scope._cleanups = name, priority, next(_request_ids), []
    token = _new_object(UncheckedToken)
    token.state, token.unchecked = _state.set(_EMPTY), _unchecked.set(scope)
    return scope, token


#: What :func:`open_scope` replaced (its ``old_value``), so :func:`close_scope` can put it back.
ScopeToken = contextvars.Token


def open_scope(scope: RequestScope) -> ScopeToken:
    """Make ``scope`` current; pair with :func:`close_scope`.

    The transaction and lease stacks start empty: a thread reused by a WSGI server
    must not carry the previous request's state into this one.  What they held
    before is restored on close (a test that holds a lock and calls a test client).
    """
    scope_opened(scope.token)  # its token, not the scope: an abandoned scope is not kept alive
    return _state.set((scope, (), ()))


def close_scope(scope: RequestScope, token: ScopeToken | UncheckedToken | None = None) -> None:
    """Close ``scope`` and restore what was current before it."""
    if type(token) is UncheckedToken:  # a request the sample left out: its cleanups (LeftOutScope.close)
        if scope._cleanups:
            scope.close_cleanups()
        try:
            _state.reset(token.state)
        except ValueError:  # closed from another context: put back what it replaced
            _state.set(_EMPTY)
        try:
            _unchecked.reset(token.unchecked)
        except ValueError:
            _unchecked.set(None)
        return
    scope.close()
    scope_closed(scope.token)
    if token is not None:
        try:
            _state.reset(token)
        except ValueError:  # closed from another context (e.g. a server thread)
            current, _, _ = _state.get()
            previous = _EMPTY if token.old_value is contextvars.Token.MISSING else token.old_value
            _, transactions, leases = previous
            _state.set((None if current is scope else current, transactions, leases))
    elif current_scope() is scope:
        _state.set(_EMPTY)


#: The scopes in which a test's own code runs (the pytest plugin opens one per test), by
#: their token -> whether their reports are quiet (see :func:`mark_test_code`).  Kept apart
#: from :class:`RequestScope` so that a request pays nothing for it: it is asked only when
#: a violation is reported or a write finds an object read in another scope.
_test_code: dict[object, bool] = {}


def mark_test_code(scope: RequestScope, *, quiet: bool) -> None:
    """Say that ``scope`` runs a test's own code, outside any request: its writes are told
    apart from requests' (``Violation.outside_request``), kept quiet when ``quiet``, and an
    object it loaded through a Session that a request then shares is that request's read."""
    _test_code[scope.token] = quiet


def unmark_test_code(scope: RequestScope) -> None:
    _test_code.pop(scope.token, None)


def test_code_scope(token: object) -> bool | None:
    """For a scope's token: None when it is no test's own scope, else whether it is quiet."""
    return _test_code.get(token)


@contextmanager
def request_scope(name: str = "", priority: Priority = Priority.INTERACTIVE) -> Iterator[RequestScope]:
    """Check a unit of work outside a web request: a job, a command, a test."""
    scope = RequestScope(name=name, priority=priority)
    token = open_scope(scope)
    try:
        yield scope
    finally:
        close_scope(scope, token)


# -- transactions -----------------------------------------------------------

def current_transaction() -> Transaction | None:
    """The innermost transaction (or savepoint) of this context, if any."""
    _, stack, _ = _state.get()
    return stack[-1] if stack else None


def push_transaction(txn: Transaction) -> None:
    scope, stack, leases = _state.get()
    _state.set((scope, stack + (txn,), leases))


def pop_transaction(txn: Transaction) -> None:
    """Remove ``txn`` (and anything opened inside it that was not closed)."""
    scope, stack, leases = _state.get()
    for i in range(len(stack) - 1, -1, -1):
        if stack[i] is txn:
            _state.set((scope, stack[:i], leases))
            return


class _TransactionBlock(ContextDecorator):
    """What :func:`transaction` returns: a class, not a generator, because it runs
    around every transaction of a generic data layer, checker on or off."""

    def __init__(self, isolation: str, prevents_lost_update: bool, database: str, label: str) -> None:
        self._options = (isolation, prevents_lost_update, database, label)
        self._txn: Transaction | None = None

    def _recreate_cm(self) -> _TransactionBlock:  # used as a decorator: one block per call
        return _TransactionBlock(*self._options)

    def __enter__(self) -> Transaction:
        isolation, prevents_lost_update, database, label = self._options
        outer = current_transaction()
        txn = self._txn = new_transaction(
            isolation=isolation, prevents_lost_update=prevents_lost_update, database=database, label=label,
            parent=outer if outer is not None and outer.database == database else None)
        push_transaction(txn)
        return txn

    def __exit__(self, *exc_info: Any) -> None:
        if self._txn is not None:
            pop_transaction(self._txn)


def transaction(
    *,
    isolation: str = "serializable",
    prevents_lost_update: bool = True,
    database: str = "default",
    label: str = "",
) -> _TransactionBlock:
    """Tell the checker a transaction is open (generic data layers).

    ``with txnsafety.transaction(...) as txn:`` yields the :class:`Transaction`.
    Nested use makes a savepoint that shares the outer root.
    """
    return _TransactionBlock(isolation, prevents_lost_update, database, label)


# -- leases -----------------------------------------------------------------

def held_leases() -> tuple[LeaseLike, ...]:
    """The lock leases this context holds, outermost first."""
    _, _, leases = _state.get()
    return leases


def find_lease(key: str) -> LeaseLike | None:
    """The innermost lease held for ``key`` (live or not), or None."""
    _, _, leases = _state.get()
    for lease in reversed(leases):
        if lease.key == key:
            return lease
    return None


def enter_lease(lease: LeaseLike) -> None:
    """Record that this context now holds ``lease`` (called by the lock service)."""
    scope, transactions, leases = _state.get()
    _state.set((scope, transactions, leases + (lease,)))


def exit_lease(lease: LeaseLike) -> None:
    """Forget ``lease``; identity, not equality, decides which entry goes."""
    scope, transactions, stack = _state.get()
    for i in range(len(stack) - 1, -1, -1):
        if stack[i] is lease:
            _state.set((scope, transactions, stack[:i] + stack[i + 1:]))
            return
