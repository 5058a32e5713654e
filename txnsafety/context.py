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
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Protocol, runtime_checkable
from contextlib import contextmanager

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
        return Transaction(tid, parent.root_id, parent.isolation, parent.prevents_lost_update,
                           parent.database, label or parent.label)
    return Transaction(tid, tid, isolation, prevents_lost_update, database, label)


@dataclass(eq=False)
class RequestScope:
    """Everything the checker remembers about one request (or job, or test).

    Created by the middleware, the pytest plugin or :func:`request_scope`; dropped
    whole when the request ends, so nothing leaks into the next one.
    """

    name: str = ""
    priority: Priority = Priority.INTERACTIVE
    id: str = field(default_factory=lambda: f"{_PROCESS_TAG}-{next(_request_ids)}")
    #: id(entity) -> (entity, ReadStamp); the strong reference keeps ids unique.
    stamps: dict[int, tuple[Any, Any]] = field(default_factory=dict)
    #: (model, key) -> {id(entity): latest WriteRecord of that object}.
    writes: dict[tuple[str, str], dict[int, Any]] = field(default_factory=dict)
    violations: list[Any] = field(default_factory=list)
    reported: set[tuple[Any, ...]] = field(default_factory=set)
    single_writer: str | None = None
    _cleanups: list[Callable[[], None]] = field(default_factory=list)
    _clock: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def tick(self) -> int:
        """A per-request logical clock: orders reads and writes across hops."""
        return next(self._clock)

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
        with self._lock:
            cleanups, self._cleanups = self._cleanups, []
        for fn in reversed(cleanups):
            try:
                fn()
            except Exception:  # a cleanup must not break the request
                log.exception("txnsafety: cleanup failed at end of request %s", self.id)
        self.stamps.clear()
        self.writes.clear()
        self.reported.clear()


_scope: contextvars.ContextVar[RequestScope | None] = contextvars.ContextVar(
    "txnsafety_scope", default=None)
_transactions: contextvars.ContextVar[tuple[Transaction, ...]] = contextvars.ContextVar(
    "txnsafety_transactions", default=())
_leases: contextvars.ContextVar[tuple[LeaseLike, ...]] = contextvars.ContextVar(
    "txnsafety_leases", default=())


def current_scope() -> RequestScope | None:
    """The request scope in force, or None outside any request."""
    return _scope.get()


@dataclass(frozen=True)
class ScopeToken:
    """What :func:`open_scope` replaced, so :func:`close_scope` can put it back."""

    scope: contextvars.Token
    transactions: tuple[Transaction, ...]
    leases: tuple["LeaseLike", ...]


def open_scope(scope: RequestScope) -> ScopeToken:
    """Make ``scope`` current; pair with :func:`close_scope`.

    The transaction and lease stacks start empty: a thread reused by a WSGI server
    must not carry the previous request's state into this one.  What they held
    before is restored on close (a test that holds a lock and calls a test client).
    """
    token = ScopeToken(_scope.set(scope), _transactions.get(), _leases.get())
    _transactions.set(())
    _leases.set(())
    return token


def close_scope(scope: RequestScope, token: ScopeToken | None = None) -> None:
    """Close ``scope`` and restore what was current before it."""
    scope.close()
    if token is not None:
        try:
            _scope.reset(token.scope)
        except ValueError:  # closed from another context (e.g. a server thread)
            if _scope.get() is scope:
                _scope.set(None)
        _transactions.set(token.transactions)
        _leases.set(token.leases)
    elif _scope.get() is scope:
        _scope.set(None)
        _transactions.set(())
        _leases.set(())


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
    stack = _transactions.get()
    return stack[-1] if stack else None


def push_transaction(txn: Transaction) -> None:
    _transactions.set(_transactions.get() + (txn,))


def pop_transaction(txn: Transaction) -> None:
    """Remove ``txn`` (and anything opened inside it that was not closed)."""
    stack = _transactions.get()
    for i in range(len(stack) - 1, -1, -1):
        if stack[i] is txn:
            _transactions.set(stack[:i])
            return


@contextmanager
def transaction(
    *,
    isolation: str = "serializable",
    prevents_lost_update: bool = True,
    database: str = "default",
    label: str = "",
) -> Iterator[Transaction]:
    """Tell the checker a transaction is open (generic data layers).

    Nested use makes a savepoint that shares the outer root.
    """
    outer = current_transaction()
    txn = new_transaction(isolation=isolation, prevents_lost_update=prevents_lost_update,
                          database=database, label=label,
                          parent=outer if outer is not None and outer.database == database else None)
    push_transaction(txn)
    try:
        yield txn
    finally:
        pop_transaction(txn)


# -- leases -----------------------------------------------------------------

def held_leases() -> tuple[LeaseLike, ...]:
    """The lock leases this context holds, outermost first."""
    return _leases.get()


def find_lease(key: str) -> LeaseLike | None:
    """The innermost lease held for ``key`` (live or not), or None."""
    for lease in reversed(_leases.get()):
        if lease.key == key:
            return lease
    return None


def enter_lease(lease: LeaseLike) -> None:
    """Record that this context now holds ``lease`` (called by the lock service)."""
    _leases.set(_leases.get() + (lease,))


def exit_lease(lease: LeaseLike) -> None:
    """Forget ``lease``; identity, not equality, decides which entry goes."""
    stack = _leases.get()
    for i in range(len(stack) - 1, -1, -1):
        if stack[i] is lease:
            _leases.set(stack[:i] + stack[i + 1:])
            return
