"""``postgresql://``: PostgreSQL advisory locks, one server session per held lock.

Why advisory locks: PostgreSQL queues waiters itself (no polling, FIFO among
conflicting requests) and ends a lock the moment its session dies, so a holder
killed with ``kill -9`` frees the lock at once.

* Key: the first 8 bytes of BLAKE2b of the backend key, as a signed bigint --
  stable across processes, Python versions and hosts (``hash()`` is not).
* Lease: the server ends a lock-holding session that stays idle longer than the
  lease (``idle_session_timeout`` in session scope,
  ``idle_in_transaction_session_timeout`` in transaction scope); ``extend()``
  resets that timer.  The local deadline starts before the acquiring statement,
  so it is never later than the server's.
* Fence: ``nextval()`` of one sequence (``txnsafety_lock_fence``), which is never
  rolled back, so fences only grow -- per key, since they grow globally.  It is
  created on first use under an advisory lock, so many processes starting at
  once do not race on the catalog.
* Scope (URL ``?scope=session`` default, or ``?scope=transaction``): in
  transaction scope the lock is ``pg_advisory_xact_lock`` inside a transaction
  that release commits; everything runs in that one transaction, so it is
  correct behind PgBouncer in transaction-pooling mode (session scope is not).
* Priority: an interactive waiter holds a *shared* advisory lock on a per-key
  marker while it waits (queued natively, FIFO).  In session scope a batch
  waiter is never queued on the lock itself: it tries the lock only while no
  interactive waiter is registered and sleeps on LISTEN until a release
  NOTIFYs (releases notify only when a batch waiter is registered), re-checking
  at least every second.  In transaction scope (LISTEN only takes effect at
  commit) a batch acquirer waits until no interactive waiter is registered and
  then queues FIFO: an interactive waiter that arrives after a batch waiter is
  queued goes after it, so batch cannot starve interactive but can precede it once.
* Owner-only: only the session that took an advisory lock can unlock it; a
  lease's connection is private to it.

URL query options (removed from the connection string): ``scope``,
``fence_sequence``, ``timeout`` (seconds, default 5: the connect timeout, at
least 2 as in libpq, and the client-side deadline of each call beyond its lock
wait -- a :mod:`~txnsafety.locks.watchdog` shuts a stalled connection down).
"""
from __future__ import annotations

import asyncio
import select
import threading
import time
import weakref
from typing import Any, Generator
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import errors as pg_errors

from ..context import Priority
from .backend import AcquireRequest, Backend, Grant, HeldLock
from .errors import BackendUnavailable, LockTimeout
from .postgres_async import AsyncPostgres
from .postgres_sql import (_MAX_IDLE, _OURS, _SETUP_KEY, SCOPES, ScopeSql, Step, _channel, _connect_timeout, _Flag,
                           _session_gone, _split, key_hash)
from .watchdog import WATCHDOG

__all__ = ["PostgresBackend", "key_hash"]


class PostgresBackend(AsyncPostgres, Backend):
    """See the module docstring."""

    scheme = "postgresql"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
        ours = {k: v for k, v in query if k in _OURS}
        rest = [(k, v) for k, v in query if k not in _OURS]
        self.conninfo = urlunsplit(parts._replace(scheme="postgresql", query=urlencode(rest)))
        self.scope = ours.get("scope", "session")
        if self.scope not in ("session", "transaction"):
            raise ValueError("txnsafety: postgresql lock scope must be 'session' or 'transaction'")
        # connect and socket timeout: what one call to a stalled server may cost
        self.timeout = float(ours.get("timeout", "5"))
        if self.timeout <= 0:
            raise ValueError("txnsafety: postgresql timeout must be positive")
        self.sequence = ours.get("fence_sequence", "txnsafety_lock_fence")
        if not self.sequence.replace("_", "").replace(".", "").isalnum():
            raise ValueError("txnsafety: fence_sequence must be a plain identifier")
        self._idle: list[psycopg.Connection[Any]] = []
        self._aidle: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[Any]]" = \
            weakref.WeakKeyDictionary()
        self._mutex = threading.Lock()
        self._seq_ready = False

    # -- connections ---------------------------------------------------------------------
    def _setup_steps(self) -> list[tuple[str, tuple[Any, ...]]]:
        """Statements that create the fence sequence, safely under concurrency.

        ``CREATE SEQUENCE IF NOT EXISTS`` alone is not: sessions that all find it
        missing all insert its catalog rows and all but one fail with a
        UniqueViolation.  So the creation runs in a transaction under an advisory
        lock of its own (the second creator waits, then finds it), and only when
        ``to_regclass`` does not already see the sequence (no DDL, no lock, no
        CREATE right needed once it exists).
        """
        if self._seq_ready:
            return []
        return [("BEGIN", ()), ("SELECT pg_advisory_xact_lock(%s)", (_SETUP_KEY,)),
                (f"CREATE SEQUENCE IF NOT EXISTS {self.sequence}", ()), ("COMMIT", ())]

    def _ensure_sequence(self, conn: psycopg.Connection[Any]) -> None:
        if self._seq_ready:
            return
        if conn.execute("SELECT to_regclass(%s) IS NULL", (self.sequence,)).fetchone()[0]:
            for sql, params in self._setup_steps():
                conn.execute(sql, params)
        self._seq_ready = True

    def _guard(self, conn: Any, deadline: float | None = None) -> Any:
        """The watchdog over one operation on ``conn`` (default: one socket timeout)."""
        return WATCHDOG.guard(conn, deadline if deadline is not None else time.monotonic() + self.timeout)

    def _pop_idle(self, pool: list[Any]) -> Any:
        """A pooled connection whose session is still there (a cut one is dropped)."""
        while pool:
            conn = pool.pop()
            if not _session_gone(conn):
                return conn
            conn.pgconn.finish()
        return None

    def _get(self) -> psycopg.Connection[Any]:
        with self._mutex:
            conn = self._pop_idle(self._idle)
        if conn is not None:
            return conn
        conn = psycopg.connect(self.conninfo, autocommit=True, connect_timeout=_connect_timeout(self.timeout))
        try:
            with self._guard(conn):
                self._ensure_sequence(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _put(self, conn: psycopg.Connection[Any]) -> None:
        if conn.closed or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.close()
            return
        with self._mutex:
            if len(self._idle) < _MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    # -- the acquisition protocol, shared by sync and async drivers ---------------------
    def _steps(self, req: AcquireRequest) -> Step:
        """Yields (sql, params), receives the first row; returns the Grant.

        One try first (most locks are free); a lock that is taken is then waited for
        by :meth:`_batch_steps` (a session-scope batch acquirer) or :meth:`_queued_steps`.
        """
        sql = SCOPES[self.scope]
        k = key_hash(req.backend_key)
        marker = key_hash("txnsafety:interactive:" + req.backend_key)
        lease_ms = str(max(int(req.lease_seconds * 1000), 1))
        t0 = start = time.monotonic()
        if sql.xact:
            yield "BEGIN", ()
        row = yield (
            f"SELECT f, set_config(%s, CASE WHEN f IS NULL THEN '0' ELSE %s END, {sql.local}) FROM "
            f"(SELECT CASE WHEN {sql.try_fn}(%s) THEN nextval(%s) END AS f, "
            f"set_config('application_name', %s, {sql.local})) s",
            (sql.idle_guc, lease_ms, k, self.sequence, req.owner[:63]))
        if row[0] is not None:
            return Grant(int(row[0]), start=start)
        waited_on = yield "HOLDER", (k,)
        if req.wait_timeout <= 0:
            raise LockTimeout(req.key, 0.0, waited_on)
        until = t0 + req.wait_timeout
        if req.priority is Priority.BATCH and not sql.xact:
            return (yield from self._batch_steps(req, k, marker, lease_ms, t0, until, waited_on))
        return (yield from self._queued_steps(req, sql, k, marker, lease_ms, t0, until, waited_on))

    def _queued_steps(self, req: AcquireRequest, sql: ScopeSql, k: int, marker: int, lease_ms: str, t0: float,
                      until: float, waited_on: str | None) -> Step:
        """Wait in PostgreSQL's own queue for the lock, bounded by ``lock_timeout``.

        An interactive waiter registers on the marker (shared) while it waits; a
        transaction-scope batch acquirer first waits until no interactive one is.
        The marker is a *session-level* lock even in transaction scope, always
        released inside the transaction (also on timeout, via the savepoint), so it
        never outlives it: still correct behind transaction pooling.
        """
        xact, local = sql.xact, sql.local

        def timeout_ms() -> str:
            return str(max(int((until - time.monotonic()) * 1000), 1))

        try:
            if xact:
                yield "SAVEPOINT txnsafety_wait", ()
            yield "SELECT set_config('lock_timeout', %s, %s)", (timeout_ms(), local)
            if req.priority is Priority.INTERACTIVE:
                # registered as an interactive waiter for as long as we wait
                yield "SELECT pg_advisory_lock_shared(%s)", (marker,)
            else:
                # transaction-scope batch: first wait until no interactive waiter is queued
                yield "SELECT pg_advisory_lock(%s), pg_advisory_unlock(%s)", (marker, marker)
            yield "SELECT set_config('lock_timeout', %s, %s)", (timeout_ms(), local)
            start = time.monotonic()
            # The lock is taken in the FROM subquery (volatile: never flattened), so
            # it happens before the fence, the timeouts and the marker's release --
            # one round trip from being granted to returning.
            unmark = ", pg_advisory_unlock_shared(%s)" if req.priority is Priority.INTERACTIVE else ""
            row = yield (f"SELECT nextval(%s), set_config(%s, %s, {local}), "
                         f"set_config('lock_timeout', '0', {local}){unmark} "
                         f"FROM (SELECT {sql.lock_fn}(%s)) AS locked",
                         (self.sequence, sql.idle_guc, lease_ms,
                          *((marker,) if unmark else ()), k))
            if xact:
                yield "RELEASE SAVEPOINT txnsafety_wait", ()
            return Grant(int(row[0]), start=start, waited=time.monotonic() - t0, waited_on=waited_on)
        except pg_errors.LockNotAvailable:
            if xact:
                yield "ROLLBACK TO SAVEPOINT txnsafety_wait", ()
                yield "SELECT pg_advisory_unlock_all()", ()
                yield "ROLLBACK", ()
            else:
                yield "SELECT pg_advisory_unlock_all(), set_config('lock_timeout', '0', false)", ()
            holder = yield "HOLDER", (k,)
            raise LockTimeout(req.key, req.wait_timeout, holder) from None

    def _batch_steps(self, req: AcquireRequest, k: int, marker: int, lease_ms: str, t0: float,
                     until: float, waited_on: str | None) -> Step:
        """Session-scope batch waiter: never queued on the lock itself.

        Queued on the lock, a batch waiter would be served before interactive
        waiters that came later (PostgreSQL's queue is FIFO).  So it only *tries*
        the lock, when no interactive waiter is registered, and sleeps on
        LISTEN until a release NOTIFYs (releases notify only while a batch waiter
        is registered on the batch marker), re-checking at most every second.
        """
        batch_marker = key_hash("txnsafety:batch:" + req.backend_key)
        channel = _channel(k)
        yield "SELECT pg_advisory_lock_shared(%s)", (batch_marker,)
        yield "ARM", ()
        yield f'LISTEN "{channel}"', ()

        def cleanup() -> Generator[tuple[str, tuple[Any, ...]], Any, None]:
            yield "DISARM", ()
            yield f'UNLISTEN "{channel}"', ()
            yield "SELECT pg_advisory_unlock_shared(%s)", (batch_marker,)

        while True:
            start = time.monotonic()
            row = yield (
                "SELECT CASE WHEN pg_try_advisory_lock(%s) THEN CASE WHEN pg_advisory_unlock(%s) THEN "
                "CASE WHEN pg_try_advisory_lock(%s) THEN nextval(%s) END END END",
                (marker, marker, k, self.sequence))
            if row[0] is not None:
                yield from cleanup()
                yield "SELECT set_config('idle_session_timeout', %s, false)", (lease_ms,)
                return Grant(int(row[0]), start=start, waited=time.monotonic() - t0, waited_on=waited_on)
            left = until - time.monotonic()
            if left <= 0:
                yield from cleanup()
                holder = yield "HOLDER", (k,)
                raise LockTimeout(req.key, req.wait_timeout, holder)
            yield "WAIT", (min(left, 1.0),)

    _HOLDER_SQL = ("SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                   "WHERE l.locktype = 'advisory' AND l.granted AND l.classid = %s AND l.objid = %s "
                   "AND l.objsubid = 1 LIMIT 1")

    def _holder_sql(self, k: int) -> tuple[str, tuple[Any, ...]]:
        return self._HOLDER_SQL, _split(k)

    # -- blocking -------------------------------------------------------------------------
    def acquire(self, req: AcquireRequest) -> Grant:
        # the whole attempt: its wait plus one socket timeout, however the server stalls
        deadline = time.monotonic() + max(req.wait_timeout, 0.0) + self.timeout
        try:
            conn = self._get()
        except psycopg.Error as exc:
            raise BackendUnavailable(req.key, self.name, exc) from exc
        with self._guard(conn, deadline):
            return self._acquire_on(conn, req)

    def _acquire_on(self, conn: psycopg.Connection[Any], req: AcquireRequest) -> Grant:
        gen = self._steps(req)
        flag = _Flag()
        to_send: Any = None
        error: BaseException | None = None
        try:
            while True:
                try:
                    sql, params = gen.send(to_send) if error is None else gen.throw(error)
                except StopIteration as stop:
                    grant: Grant = stop.value
                    grant.handle = conn
                    return grant
                error = None
                try:
                    if sql == "HOLDER":
                        row = conn.execute(*self._holder_sql(params[0])).fetchone()
                        to_send = row[0] if row else None
                    elif sql == "ARM":
                        flag = _Flag()
                        conn.add_notify_handler(flag)
                    elif sql == "DISARM":
                        conn.remove_notify_handler(flag)
                    elif sql == "WAIT":
                        # A NOTIFY read during a query already hit the handler; one
                        # still in the socket makes it readable: a no-op query reads it.
                        if not flag.take():
                            readable, _, _ = select.select([conn.fileno()], [], [], params[0])
                            if readable:
                                conn.execute("SELECT 1")
                            flag.take()
                    else:
                        cur = conn.execute(sql, params)
                        to_send = cur.fetchone() if cur.description else None
                except pg_errors.LockNotAvailable as exc:
                    error = exc
        except LockTimeout:
            self._reset(conn)
            raise
        except psycopg.Error as exc:
            conn.close()
            raise BackendUnavailable(req.key, self.name, exc) from exc
        except BaseException:
            conn.close()
            raise

    def _reset(self, conn: psycopg.Connection[Any]) -> None:
        """Back to a clean idle session (no locks, no timeouts) for the pool."""
        try:
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                conn.execute("ROLLBACK")
            conn.execute("SELECT pg_advisory_unlock_all(), set_config('lock_timeout', '0', false), "
                         "set_config('idle_session_timeout', '0', false)")
            self._put(conn)
        except psycopg.Error:
            conn.close()

    # Unlock, and wake batch waiters only when one is registered: a batch waiter
    # holds the batch marker shared, so an exclusive try-lock on it fails.
    _RELEASE_SQL = (
        "SELECT pg_advisory_unlock(%s), set_config('idle_session_timeout', '0', false), "
        "CASE WHEN pg_try_advisory_lock(%s) THEN pg_advisory_unlock(%s) "
        "ELSE pg_notify(%s, '') IS NULL END")

    def _release_params(self, lease: HeldLock) -> tuple[Any, ...]:
        k = key_hash(lease.backend_key)
        batch_marker = key_hash("txnsafety:batch:" + lease.backend_key)
        return (k, batch_marker, batch_marker, _channel(k))

    def release(self, lease: HeldLock) -> bool:
        conn = lease.handle
        if not isinstance(conn, psycopg.Connection):
            if conn is not None:  # an async lease released from sync code (scope cleanup)
                self.abandon(lease)
                return True
            return False
        lease.handle = None
        if _session_gone(conn):
            conn.close()
            return False  # the session ended before the release: the lock went with it
        try:
            with self._guard(conn):
                if self.scope == "transaction":
                    conn.execute("COMMIT")
                    ok = True
                else:
                    ok = bool(conn.execute(self._RELEASE_SQL, self._release_params(lease)).fetchone()[0])
        except psycopg.Error as exc:
            # In doubt: the connection failed during the release.  Closing it ends
            # the session, which releases the lock if the statement did not.
            conn.close()
            raise BackendUnavailable(lease.key, self.name, exc) from exc
        self._put(conn)
        return ok

    _HELD_SQL = ("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
                 "AND pid = pg_backend_pid() AND classid = %s AND objid = %s AND objsubid = 1")

    def _extend_sql(self) -> str:
        local = "true" if self.scope == "transaction" else "false"
        guc = "idle_session_timeout" if self.scope == "session" else "idle_in_transaction_session_timeout"
        return (f"SELECT set_config('{guc}', %s, {local}), count(*) FROM pg_locks WHERE "
                f"locktype = 'advisory' AND granted AND pid = pg_backend_pid() AND classid = %s "
                f"AND objid = %s AND objsubid = 1")

    def extend(self, lease: HeldLock, seconds: float) -> bool:
        conn = lease.handle
        if not isinstance(conn, psycopg.Connection):
            return False
        try:
            with self._guard(conn):
                row = conn.execute(self._extend_sql(), (str(max(int(seconds * 1000), 1)),
                                                        *_split(key_hash(lease.backend_key)))).fetchone()
            return bool(row[1])
        except psycopg.Error:
            return False

    def is_held(self, lease: HeldLock) -> bool:
        conn = lease.handle
        if not isinstance(conn, psycopg.Connection):
            return False
        try:
            with self._guard(conn):
                row = conn.execute(self._HELD_SQL, _split(key_hash(lease.backend_key))).fetchone()
            return bool(row[0])
        except psycopg.Error:
            return False

    def lost_locally(self, lease: HeldLock) -> bool:
        """Has the session holding ``lease`` ended?  No round trip: a look at its socket.

        A lock-holding session is idle, so nothing should arrive on its socket.
        When the connection is cut or the session killed, the server drops the
        advisory lock at once, and the socket turns readable (the server's
        goodbye, or end of file).  Reading what is there tells which.  A
        connection busy in another thread (the renewer) is not looked at.
        """
        conn = lease.handle
        if conn is None or conn.closed:
            return True
        lock = conn.lock
        if isinstance(lock, asyncio.Lock):
            return False if lock.locked() else _session_gone(conn)
        if not lock.acquire(blocking=False):
            return False
        try:
            return _session_gone(conn)
        finally:
            lock.release()

    def holder(self, backend_key: str) -> str | None:
        conn = self._get()
        try:
            row = conn.execute(*self._holder_sql(key_hash(backend_key))).fetchone()
            return row[0] if row else None
        finally:
            self._put(conn)

    def waiting(self, backend_key: str) -> int:
        """Sessions waiting for ``backend_key``: queued interactive plus registered batch waiters."""
        conn = self._get()
        try:
            k = _split(key_hash(backend_key))
            b = _split(key_hash("txnsafety:batch:" + backend_key))
            return conn.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND ("
                "(NOT granted AND classid = %s AND objid = %s) OR (granted AND classid = %s AND objid = %s))",
                (*k, *b)).fetchone()[0]
        finally:
            self._put(conn)

    def abandon(self, lease: HeldLock) -> None:
        """Drop the session that holds the lock: the server releases it."""
        conn, lease.handle = lease.handle, None
        if conn is None:
            return
        try:
            conn.pgconn.finish()
        except Exception:  # pragma: no cover
            pass

    def close(self) -> None:
        with self._mutex:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # -- async ------------------------------------------------------------------------
