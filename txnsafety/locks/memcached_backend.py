"""``memcached://host:port``: atomic ``add``, owner-only delete/extend via meta commands.

Why meta commands: the classic protocol's ``delete`` cannot compare anything,
so "GET, compare token, DELETE" (sherlock's release) can delete the *next*
holder's lock.  With meta commands the release is ``md <key> C<cas>`` with the
CAS our own add returned: the delete only happens if nobody wrote the key since;
extend is ``ms <key> C<cas> T<ttl>`` the same way.

* Acquire: ``ms <key> ME c`` (add mode: stores only if absent; returns the CAS),
  pipelined with the fence increment: one round trip.  Release is then one
  round trip too: ``md <key> C<cas>`` deletes only the item our add created.
  memcached's TTL has one-second precision, so the TTL is the lease rounded up
  plus one second and the local deadline stays ``start + lease``: the server
  never ends a lease before the holder thinks it has.
* Fence: ``ma <key>:f N0 J<now in microseconds>`` (auto-created counter).  If the
  counter is evicted it restarts from the current time in microseconds, which
  is above every fence handed out before: fences keep growing.
* Eviction: a lock evicted early is found missing by ``ensure_held(check_backend=True)``,
  ``extend()`` and release, which mark the lease LOST (release reports TXN104).
* Waiting: memcached has no notifications, so waiters retry with bounded
  exponential backoff (2 ms doubling up to ``max_backoff``, default 50 ms, with
  jitter).  Interactive waiters count themselves in a per-lock counter (``ma``,
  2 s TTL refreshed while they wait, so a crashed waiter is forgotten) and batch
  acquirers do not try while it is above zero: batch never starves interactive.
  Arrival order among interactive waiters is not guaranteed on this backend.
* Keys: printable ASCII keys up to 180 bytes are used as they are; anything else
  (spaces, control characters, non-ASCII, empty, long) is replaced by its SHA-256
  under a different prefix, so no two lock ids share a memcached key.

URL query options: ``prefix`` (default ``txnsafety``), ``max_backoff`` (seconds),
``timeout`` (socket timeout, default 2 s).
"""
from __future__ import annotations

import hashlib
import logging
import math
import random
import socket
import threading
import time
from urllib.parse import parse_qsl, urlsplit

from ..context import Priority
from .backend import AcquireRequest, Backend, Grant, HeldLock
from .errors import BackendUnavailable, LockTimeout

log = logging.getLogger("txnsafety.locks")

MARKER_TTL = 2


class ProtocolError(Exception):
    pass


class _Conn:
    """One text-protocol connection (meta commands)."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = self.sock.makefile("rb")

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def line(self) -> list[bytes]:
        raw = self.reader.readline()
        if not raw.endswith(b"\r\n"):
            raise ConnectionError("memcached closed the connection")
        parts = raw[:-2].split()
        if not parts or parts[0] in (b"ERROR", b"CLIENT_ERROR", b"SERVER_ERROR"):
            raise ProtocolError(raw[:-2].decode("ascii", "replace"))
        return parts

    def value(self) -> tuple[list[bytes], bytes | None]:
        """Read an ``mg``/``ma`` reply: (header, data or None on a miss)."""
        head = self.line()
        if head[0] != b"VA":
            return head, None
        size = int(head[1])
        data = self.reader.read(size + 2)
        return head, data[:-2]

    def close(self) -> None:
        try:
            self.reader.close()
            self.sock.close()
        except OSError:  # pragma: no cover
            pass


def _flag(head: list[bytes], letter: bytes) -> bytes | None:
    for part in head[1:]:
        if part[:1] == letter:
            return part[1:]
    return None


class MemcachedBackend(Backend):
    """See the module docstring."""

    scheme = "memcached"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query))
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 11211
        self.prefix = query.get("prefix", "txnsafety")
        if not self.prefix or len(self.prefix) > 40 or not all(33 <= ord(c) <= 126 for c in self.prefix):
            raise ValueError("txnsafety: memcached prefix must be 1-40 printable ASCII characters")
        self.max_backoff = float(query.get("max_backoff", "0.05"))
        self.timeout = float(query.get("timeout", "2"))
        self._local = threading.local()
        self._all: list[_Conn] = []
        self._mutex = threading.Lock()
        self._waiting: dict[str, int] = {}

    # -- keys -------------------------------------------------------------------------
    def safe_key(self, backend_key: str) -> str:
        """The memcached key for a lock key: as is when safe, else its SHA-256."""
        raw = backend_key.encode("utf-8", "surrogatepass")
        if raw and len(raw) <= 180 and all(33 <= b <= 126 for b in raw):
            return f"{self.prefix}:k:{backend_key}"
        return f"{self.prefix}:h:{hashlib.sha256(raw).hexdigest()}"

    # -- connection -------------------------------------------------------------------
    def _conn(self) -> _Conn:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = _Conn(self.host, self.port, self.timeout)
            self._local.conn = conn
            with self._mutex:
                self._all.append(conn)
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.close()

    def _fail(self, key: str, exc: BaseException) -> BackendUnavailable:
        self._drop()
        return BackendUnavailable(key, self.name, exc)

    # -- commands ---------------------------------------------------------------------
    def _get(self, conn: _Conn, mkey: str) -> tuple[list[bytes], bytes | None]:
        conn.send(f"mg {mkey} v c t\r\n".encode())
        return conn.value()

    @staticmethod
    def _parse(data: bytes) -> tuple[str, str]:
        """(token, owner) from a lock value."""
        token, _, owner = data.decode("utf-8", "replace").partition(" ")
        return token, owner

    # -- blocking -------------------------------------------------------------------------
    def acquire(self, req: AcquireRequest) -> Grant:
        """Round trips (:meth:`_Acquisition.round_trip`) with backoff until the add wins or the wait ends."""
        attempt = _Acquisition(self, req)
        try:
            attempt.conn = self._conn()
            while True:
                grant = attempt.round_trip()
                if grant is not None:
                    return grant
                attempt.note_first_holder()
                now = time.monotonic()
                if now >= attempt.until:
                    raise attempt.timed_out()
                if not attempt.registered:
                    attempt.registered = True
                    self._count(req.backend_key, +1)
                    if not attempt.batch:
                        continue  # register as an interactive waiter right away
                attempt.back_off(now)
        except (OSError, ProtocolError, ValueError) as exc:
            attempt.counted = False
            raise self._fail(req.key, exc) from exc
        finally:
            attempt.settle()

    def _abandon(self, mkey: str, data: bytes) -> None:
        """Best-effort delete of the lock item a failing ``acquire`` may have added.

        The add may have stored the item although its reply was lost or unreadable;
        left alone the lock would stay taken, by nobody who knows it, until its TTL.
        The item is ours only if it holds our value (the token is unique to the call),
        and ``md`` with the CAS just read deletes it only if nobody wrote it since.
        A failure here is logged: the TTL is then the last resort.
        """
        try:
            conn = self._conn()
            head, current = self._get(conn, mkey)
            if current == data:
                conn.send(f"md {mkey} C{(_flag(head, b'c') or b'0').decode()}\r\n".encode())
                conn.line()
        except Exception as exc:
            log.warning("txnsafety: memcached %s: could not give back %s after a failed acquire "
                        "(it ends with its TTL): %r", self.name, mkey, exc)
        finally:
            self._drop()  # this thread's connection

    def _count(self, bk: str, delta: int) -> None:
        with self._mutex:
            n = self._waiting.get(bk, 0) + delta
            if n:
                self._waiting[bk] = n
            else:
                self._waiting.pop(bk, None)

    def waiting(self, backend_key: str) -> int:
        """Waiters for ``backend_key`` in *this process* (memcached cannot tell more)."""
        with self._mutex:
            return self._waiting.get(backend_key, 0)

    def _owned(self, conn: _Conn, mkey: str, token: str) -> tuple[bytes, bytes] | None:
        head, data = self._get(conn, mkey)
        if data is None or self._parse(data)[0] != token:
            return None
        return _flag(head, b"c") or b"0", data

    def release(self, lease: HeldLock) -> bool:
        """One round trip: delete only if the item still has the CAS our add (or extend) got."""
        mkey = self.safe_key(lease.backend_key)
        try:
            conn = self._conn()
            if isinstance(lease.handle, tuple):
                cas = str(lease.handle[0]).encode()
            else:  # no CAS remembered: compare the token first
                owned = self._owned(conn, mkey, lease.token)
                if owned is None:
                    return False
                cas = owned[0]
            conn.send(f"md {mkey} C{cas.decode()}\r\n".encode())
            reply = conn.line()[0]
            if reply == b"EX" and isinstance(lease.handle, tuple):
                # the CAS moved: an extend whose reply was lost still ran -- ours if the token is
                owned = self._owned(conn, mkey, lease.token)
                if owned is None:
                    return False
                conn.send(f"md {mkey} C{owned[0].decode()}\r\n".encode())
                reply = conn.line()[0]
            return reply == b"HD"
        except (OSError, ProtocolError, ValueError) as exc:
            raise self._fail(lease.key, exc) from exc

    def extend(self, lease: HeldLock, seconds: float) -> bool:
        """Compare-and-swap the same value with a new TTL; remembers the new CAS."""
        mkey = self.safe_key(lease.backend_key)
        try:
            conn = self._conn()
            if isinstance(lease.handle, tuple):
                cas, data = str(lease.handle[0]).encode(), lease.handle[1]
            else:
                owned = self._owned(conn, mkey, lease.token)
                if owned is None:
                    return False
                cas, data = owned
            ttl = math.ceil(seconds) + 1
            conn.send(f"ms {mkey} {len(data)} C{cas.decode()} T{ttl} c\r\n".encode() + data + b"\r\n")
            head = conn.line()
            if head[0] == b"EX" and isinstance(lease.handle, tuple):
                # the CAS moved: an extend whose reply was lost still ran -- ours if the token is
                owned = self._owned(conn, mkey, lease.token)
                if owned is None:
                    return False
                conn.send(f"ms {mkey} {len(data)} C{owned[0].decode()} T{ttl} c\r\n".encode() + data + b"\r\n")
                head = conn.line()
            if head[0] != b"HD":
                return False
            lease.handle = (int(_flag(head, b"c") or b"0"), data)
            return True
        except (OSError, ProtocolError, ValueError) as exc:
            raise self._fail(lease.key, exc) from exc

    def is_held(self, lease: HeldLock) -> bool:
        try:
            return self._owned(self._conn(), self.safe_key(lease.backend_key), lease.token) is not None
        except (OSError, ProtocolError, ValueError) as exc:
            raise self._fail(lease.key, exc) from exc

    def holder(self, backend_key: str) -> str | None:
        _, data = self._get(self._conn(), self.safe_key(backend_key))
        return self._parse(data)[1] if data is not None else None

    def close(self) -> None:
        with self._mutex:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
        self._local = threading.local()


class _Acquisition:
    """One call of :meth:`MemcachedBackend.acquire`: what it sends, and what it must undo.

    Why an object: the call's bookkeeping (counted as a waiter in this process and on
    the server, an add whose outcome is not settled yet) decides what the cleanup gives
    back, whichever step raised; the steps share it here instead of in one long loop.
    """

    __slots__ = ("backend", "req", "mkey", "fkey", "ikey", "batch", "data", "add", "t0", "until", "delay",
                 "waited_on", "registered", "counted", "in_doubt", "conn")

    def __init__(self, backend: MemcachedBackend, req: AcquireRequest) -> None:
        self.backend, self.req = backend, req
        mkey = self.mkey = backend.safe_key(req.backend_key)
        self.fkey, self.ikey = mkey + ":f", mkey + ":i"
        ttl = math.ceil(req.lease_seconds) + 1
        self.batch = req.priority is Priority.BATCH
        data = self.data = f"{req.token} {req.owner}".encode()
        self.add = f"ms {mkey} {len(data)} T{ttl} ME c\r\n".encode() + data + b"\r\n"
        self.t0 = time.monotonic()
        self.until = self.t0 + req.wait_timeout
        self.delay = 0.002
        self.waited_on: str | None = None
        self.registered = False     # counted in this process's waiter count
        self.counted = False        # counted in the server's interactive-waiter counter
        # True from sending the add until its outcome is settled: an exception raised
        # meanwhile may leave the lock won in memcached by a call that reports failure
        self.in_doubt = False
        self.conn: _Conn | None = None

    def _marker(self) -> str:
        """The interactive-waiter counter's command for this round trip ("" for none).

        A batch acquirer reads the counter; a waiting interactive one keeps it alive.
        """
        if self.batch:
            return f"mg {self.ikey} v\r\n"
        if self.registered:
            # first time +1; afterwards +0, which only refreshes the TTL
            # (and re-creates it at 1 if it expired meanwhile)
            marker = f"ma {self.ikey} N{MARKER_TTL} J1 T{MARKER_TTL} D{0 if self.counted else 1} v\r\n"
            self.counted = True
            return marker
        return ""

    def round_trip(self) -> Grant | None:
        """One round trip: the waiter counter, a fresh fence, and the atomic add that takes the lock.

        The grant when the add won (and, for a batch acquirer, no interactive waiter is
        queued); else None, with a batch acquirer's won add deleted again (it steps back).
        """
        conn = self.conn
        assert conn is not None
        marker = self._marker()
        start = time.monotonic()
        self.in_doubt = True
        conn.send(marker.encode() + f"ma {self.fkey} N0 J{time.time_ns() // 1000} v\r\n".encode() + self.add)
        interactive_waiting = False
        if marker:
            _, mdata = conn.value()
            interactive_waiting = self.batch and mdata is not None and int(mdata or b"0") > 0
        _, fence_raw = conn.value()
        head = conn.line()
        if fence_raw is None:
            raise ProtocolError("fence counter not returned")
        if head[0] == b"HD":
            cas = int(_flag(head, b"c") or b"0")
            if not interactive_waiting:
                grant = Grant(int(fence_raw), start=start, waited=start - self.t0, waited_on=self.waited_on,
                              handle=(cas, self.data))
                self.in_doubt = False
                return grant
            # an interactive waiter is queued: a batch acquirer steps back
            conn.send(f"md {self.mkey} C{cas}\r\n".encode())
            conn.line()
        self.in_doubt = False
        return None

    def note_first_holder(self) -> None:
        """Remember who held the lock when we first found it taken (for the contention log)."""
        if self.waited_on is None:
            assert self.conn is not None
            _, current = self.backend._get(self.conn, self.mkey)
            if current is not None:
                self.waited_on = self.backend._parse(current)[1]

    def timed_out(self) -> LockTimeout:
        """The timeout error, naming the holder now and the time its lease has left."""
        assert self.conn is not None
        head, current = self.backend._get(self.conn, self.mkey)
        holder = self.backend._parse(current)[1] if current is not None else None
        left = float(_flag(head, b"t") or b"-1") if current is not None else None
        return LockTimeout(self.req.key, self.req.wait_timeout, holder, left)

    def back_off(self, now: float) -> None:
        """Sleep a jittered, doubling delay (never past the deadline): memcached cannot notify."""
        time.sleep(min(self.delay * (0.5 + random.random()), self.until - now))
        self.delay = min(self.delay * 2, self.backend.max_backoff)

    def settle(self) -> None:
        """However the call ends: uncount the waiter, and give back an add left in doubt."""
        backend = self.backend
        if self.registered:
            backend._count(self.req.backend_key, -1)
        if self.in_doubt:
            # Raising with the add's outcome unsettled: give back what we may have
            # won, from a thread of its own -- against a stalled server that costs
            # another socket timeout, which the caller must not wait out.
            backend._drop()  # the failed connection may still carry unread replies
            backend._give_back_later(backend._abandon, self.mkey, self.data)
        elif self.counted and self.conn is not None:
            # Bookkeeping only (the counter forgets us after MARKER_TTL anyway): no
            # failure here may replace the call's outcome, above all a won lock's Grant.
            try:
                self.conn.send(f"ma {self.ikey} MD v\r\n".encode())
                self.conn.value()
            except Exception as exc:
                log.warning("txnsafety: memcached %s: could not uncount an interactive waiter of "
                            "lock %r: %r", backend.name, self.req.key, exc)
                backend._drop()
