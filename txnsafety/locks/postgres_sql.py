"""Pieces of the PostgreSQL backend shared by its blocking and async halves.

Advisory-lock keys, notification flags, the client-side look at an idle
session's socket, and the constants of the URL.  See
:mod:`txnsafety.locks.postgres_backend` for the design.
"""
from __future__ import annotations

import asyncio
import hashlib
import math
import select
from dataclasses import dataclass
from typing import Any, Generator

import psycopg

from .backend import Grant

_OURS = ("scope", "fence_sequence", "timeout")
_MAX_IDLE = 8
#: advisory key (BLAKE2b of "txnsafety:setup", see key_hash) serializing the fence sequence's creation
_SETUP_KEY = -5799163012311828546

Step = Generator[tuple[str, tuple[Any, ...]], Any, Grant]


@dataclass(frozen=True)
class ScopeSql:
    """What the acquisition's SQL says differently in session and transaction scope."""

    #: transaction scope: the lock lives in a transaction the acquisition opens
    xact: bool
    #: the idle timeout that ends a holder's session (or transaction): the lease
    idle_guc: str
    #: the blocking and the trying advisory-lock functions
    lock_fn: str
    try_fn: str
    #: ``set_config``'s is_local argument: settings end with the transaction or the session
    local: str


#: the scope URL option's values and their SQL
SCOPES = {
    "session": ScopeSql(False, "idle_session_timeout", "pg_advisory_lock", "pg_try_advisory_lock", "false"),
    "transaction": ScopeSql(True, "idle_in_transaction_session_timeout", "pg_advisory_xact_lock",
                            "pg_try_advisory_xact_lock", "true"),
}


def key_hash(key: str) -> int:
    """Stable signed 64-bit advisory-lock key for ``key``."""
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class _Flag:
    """Notify handler: remembers that a NOTIFY arrived while a query ran."""

    def __init__(self) -> None:
        self.seen = False

    def __call__(self, notify: Any) -> None:
        self.seen = True

    def take(self) -> bool:
        seen, self.seen = self.seen, False
        return seen


async def _readable(fd: int, timeout: float) -> bool:
    """Wait until ``fd`` is readable (True) or ``timeout`` passes (False)."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[bool] = loop.create_future()
    loop.add_reader(fd, lambda: fut.done() or fut.set_result(True))
    try:
        return await asyncio.wait_for(fut, timeout)
    except asyncio.TimeoutError:
        return False
    finally:
        loop.remove_reader(fd)


def _connect_timeout(seconds: float) -> int:
    """libpq's connect_timeout: whole seconds, at least 2 (libpq's own floor)."""
    return max(2, math.ceil(seconds))


def _session_gone(conn: Any) -> bool:
    """True when an idle connection's socket shows the server ended the session."""
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
        if not readable:
            return False
        conn.pgconn.consume_input()
        return conn.pgconn.status != psycopg.pq.ConnStatus.OK
    except (psycopg.Error, OSError, ValueError):
        return True


def _channel(k: int) -> str:
    return f"txnsafety_lock_{k & 0xFFFFFFFFFFFFFFFF:016x}"


def _split(k: int) -> tuple[int, int]:
    """(classid, objid) as pg_locks shows a bigint advisory key."""
    u = k & 0xFFFFFFFFFFFFFFFF
    return u >> 32, u & 0xFFFFFFFF
