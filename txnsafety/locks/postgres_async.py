"""The async half of the PostgreSQL backend, on psycopg's ``AsyncConnection``.

A mixin of :class:`~txnsafety.locks.postgres_backend.PostgresBackend`: the same
acquisition protocol (``_steps``), SQL and watchdog as the blocking half, driven
with ``await``; idle connections are pooled per event loop.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from .backend import AcquireRequest, Grant, HeldLock
from .errors import BackendUnavailable, LockTimeout
from .postgres_sql import _MAX_IDLE, _connect_timeout, _Flag, _readable, _session_gone, _split, key_hash


class AsyncPostgres:
    """``a*`` methods of the PostgreSQL backend (see the module docstring)."""

    # provided by PostgresBackend
    conninfo: str
    name: str
    scope: str
    timeout: float
    _seq_ready: bool
    _aidle: Any
    _HELD_SQL: str
    _RELEASE_SQL: str

    async def _aensure_sequence(self, conn: Any) -> None:
        if self._seq_ready:
            return
        cur = await conn.execute("SELECT to_regclass(%s) IS NULL", (self.sequence,))
        if (await cur.fetchone())[0]:
            for sql, params in self._setup_steps():
                await conn.execute(sql, params)
        self._seq_ready = True

    async def _aget(self) -> Any:
        loop = asyncio.get_running_loop()
        conn = self._pop_idle(self._aidle.setdefault(loop, []))
        if conn is not None:
            return conn
        conn = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True,
                                                     connect_timeout=_connect_timeout(self.timeout))
        try:
            with self._guard(conn):
                await self._aensure_sequence(conn)
        except BaseException:
            await conn.close()
            raise
        return conn

    async def _aput(self, conn: Any) -> None:
        if conn.closed or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            await conn.close()
            return
        pool = self._aidle.setdefault(asyncio.get_running_loop(), [])
        if len(pool) < _MAX_IDLE:
            pool.append(conn)
        else:
            await conn.close()

    async def aacquire(self, req: AcquireRequest) -> Grant:
        deadline = time.monotonic() + max(req.wait_timeout, 0.0) + self.timeout
        try:
            conn = await self._aget()
        except psycopg.Error as exc:
            raise BackendUnavailable(req.key, self.name, exc) from exc
        with self._guard(conn, deadline):
            return await self._aacquire_on(conn, req)

    async def _aacquire_on(self, conn: Any, req: AcquireRequest) -> Grant:
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
                        cur = await conn.execute(*self._holder_sql(params[0]))
                        row = await cur.fetchone()
                        to_send = row[0] if row else None
                    elif sql == "ARM":
                        flag = _Flag()
                        conn.add_notify_handler(flag)
                    elif sql == "DISARM":
                        conn.remove_notify_handler(flag)
                    elif sql == "WAIT":
                        if not flag.take():
                            if await _readable(conn.fileno(), params[0]):
                                await conn.execute("SELECT 1")
                            flag.take()
                    else:
                        cur = await conn.execute(sql, params)
                        to_send = await cur.fetchone() if cur.description else None
                except pg_errors.LockNotAvailable as exc:
                    error = exc
        except LockTimeout:
            await self._areset(conn)
            raise
        except psycopg.Error as exc:
            await conn.close()
            raise BackendUnavailable(req.key, self.name, exc) from exc
        except BaseException:
            # cancelled while blocked: cancel the server-side wait, then drop the session
            try:
                conn.pgconn.finish()
            except Exception:  # pragma: no cover
                pass
            raise

    async def _areset(self, conn: Any) -> None:
        try:
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                await conn.execute("ROLLBACK")
            await conn.execute("SELECT pg_advisory_unlock_all(), set_config('lock_timeout', '0', false), "
                               "set_config('idle_session_timeout', '0', false)")
            await self._aput(conn)
        except psycopg.Error:
            await conn.close()

    async def arelease(self, lease: HeldLock) -> bool:
        conn = lease.handle
        if isinstance(conn, psycopg.Connection):
            return self.release(lease)
        if conn is None:
            return False
        lease.handle = None
        if _session_gone(conn):
            await conn.close()
            return False
        try:
            with self._guard(conn):
                if self.scope == "transaction":
                    await conn.execute("COMMIT")
                    ok = True
                else:
                    cur = await conn.execute(self._RELEASE_SQL, self._release_params(lease))
                    ok = bool((await cur.fetchone())[0])
        except psycopg.Error as exc:
            await conn.close()
            raise BackendUnavailable(lease.key, self.name, exc) from exc
        await self._aput(conn)
        return ok

    async def aextend(self, lease: HeldLock, seconds: float) -> bool:
        conn = lease.handle
        if isinstance(conn, psycopg.Connection):
            return self.extend(lease, seconds)
        if conn is None:
            return False
        try:
            with self._guard(conn):
                cur = await conn.execute(self._extend_sql(), (str(max(int(seconds * 1000), 1)),
                                                              *_split(key_hash(lease.backend_key))))
                return bool((await cur.fetchone())[1])
        except psycopg.Error:
            return False

    async def ais_held(self, lease: HeldLock) -> bool:
        conn = lease.handle
        if isinstance(conn, psycopg.Connection):
            return self.is_held(lease)
        if conn is None:
            return False
        try:
            with self._guard(conn):
                cur = await conn.execute(self._HELD_SQL, _split(key_hash(lease.backend_key)))
                return bool((await cur.fetchone())[0])
        except psycopg.Error:
            return False
