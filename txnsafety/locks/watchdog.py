"""A client-side deadline for blocking socket operations that have none of their own.

Why: psycopg has no read timeout.  Against a backend that stalls without a
reset (a dead switch, a paused server, a proxy that stops forwarding), a query
waits for TCP to give up -- many minutes -- and ``tcp_user_timeout`` or
keepalives do not help when something in between still acknowledges packets.
The watchdog shuts the connection's socket down when an operation overruns its
deadline: the blocked read returns end-of-file at once and the driver raises
its ordinary connection error, in threads and on event loops alike.

One daemon thread serves every guard; arming and disarming is a heap push and a
flag under a lock, cheap enough for every lock operation.
"""
from __future__ import annotations

import heapq
import itertools
import socket
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator


class _Guard:
    __slots__ = ("conn", "done")

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.done = False


class Watchdog:
    """Shuts down the socket of a connection whose guarded operation overran."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, _Guard]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        #: how many sockets it shut down (for tests and logs)
        self.fired = 0

    @contextmanager
    def guard(self, conn: Any, deadline: float) -> Iterator[None]:
        """Within the block, ``conn`` (anything with ``fileno()`` and ``closed``) is
        shut down if the block is still running at ``deadline`` (monotonic)."""
        entry = _Guard(conn)
        with self._cond:
            heapq.heappush(self._heap, (deadline, next(self._seq), entry))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="txnsafety-watchdog", daemon=True)
                self._thread.start()
            elif self._heap[0][2] is entry:
                self._cond.notify()
        try:
            yield
        finally:
            with self._cond:
                entry.done = True

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._heap and self._heap[0][2].done:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait()
                    continue
                deadline, _, entry = self._heap[0]
                left = deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                heapq.heappop(self._heap)
                entry.done = True
                self._shut(entry.conn)

    def _shut(self, conn: Any) -> None:
        try:
            if getattr(conn, "closed", False):
                return
            sock = socket.socket(fileno=socket.dup(conn.fileno()))
        except (OSError, ValueError, Exception):  # noqa: B014 - a closed driver raises its own error
            return
        try:
            sock.shutdown(socket.SHUT_RDWR)
            self.fired += 1
        except OSError:
            pass
        finally:
            sock.close()


WATCHDOG = Watchdog()
