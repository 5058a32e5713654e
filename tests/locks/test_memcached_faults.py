"""memcached ``acquire`` when the connection fails after the lock was won.

The atomic add can win the lock in memcached while the call still fails: its reply
is lost or unreadable, the batch step-back never reaches the server, or the
waiter-counter bookkeeping that runs after the win fails.  The caller then never
learns it holds the lock, and without care the lock stays taken until its TTL.
These tests run against the real server, through a proxy that breaks the reply
to one chosen command, and check that a failed acquire never leaves the lock held.
"""
from __future__ import annotations

import logging
import socket
import threading
from collections import deque
from typing import Callable, Iterator
from urllib.parse import urlsplit

import pytest

from tests.locks.conftest import SESSION
from txnsafety.locks import BackendUnavailable, LockTimeout, global_lock
from txnsafety.locks.memcached_backend import MemcachedBackend

#: what the proxy does to the chosen command: the bytes to send the client instead
#: of the server's reply, or None to cut the connection
Fault = Callable[[bytes, bytes], "bytes | None"]


class FaultProxy:
    """A TCP proxy to memcached that breaks the reply to the first matching command.

    Commands and replies are matched in order (every meta command used here gets
    exactly one reply), so the fault hits one command even inside a pipeline.
    ``forward=False`` swallows the command instead: the server never runs it.
    """

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._mutex = threading.Lock()
        self._rule: tuple[Callable[[bytes], bool], Fault, bool] | None = None
        self._watches: list[tuple[Callable[[bytes], bool], threading.Event]] = []
        self.faulted = threading.Event()
        self._socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def break_reply(self, match: Callable[[bytes], bool], fault: Fault, *, forward: bool = True) -> None:
        """Apply ``fault`` to the reply of the first command line for which ``match`` is true."""
        with self._mutex:
            self._rule = (match, fault, forward)

    def watch(self, match: Callable[[bytes], bool]) -> threading.Event:
        """An event set once a matching command's reply has been passed to the client."""
        event = threading.Event()
        with self._mutex:
            self._watches.append((match, event))
        return event

    def _take_rule(self, command: bytes) -> tuple[Fault, bool] | None:
        with self._mutex:
            if self._rule is not None and self._rule[0](command):
                rule, self._rule = self._rule, None
                return rule[1], rule[2]
        return None

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            with self._mutex:
                self._socks += [client, server]
            pending: deque[tuple[bytes, Fault | None]] = deque()
            threading.Thread(target=self._requests, args=(client, server, pending), daemon=True).start()
            threading.Thread(target=self._replies, args=(client, server, pending), daemon=True).start()

    def _requests(self, client: socket.socket, server: socket.socket,
                  pending: deque[tuple[bytes, Fault | None]]) -> None:
        reader = client.makefile("rb")
        try:
            while line := reader.readline():
                parts = line.split()
                if parts[:1] == [b"ms"]:   # a set carries a data block
                    line += reader.read(int(parts[2]) + 2)
                rule = self._take_rule(line)
                if rule is not None and not rule[1]:
                    self.faulted.set()
                    break                  # swallowed: cut before the server sees it
                # queued before the server can answer it, so replies pair up in order
                pending.append((line, rule[0] if rule is not None else None))
                server.sendall(line)
        except OSError:
            pass
        self._cut(client, server)

    def _replies(self, client: socket.socket, server: socket.socket,
                 pending: deque[tuple[bytes, Fault | None]]) -> None:
        reader = server.makefile("rb")
        try:
            while reply := reader.readline():
                parts = reply.split()
                if parts[:1] == [b"VA"]:
                    reply += reader.read(int(parts[1]) + 2)
                command, fault = pending.popleft()
                if fault is not None:
                    self.faulted.set()
                    broken = fault(command, reply)
                    if broken is None:
                        break
                    reply = broken
                client.sendall(reply)
                with self._mutex:
                    for match, event in self._watches:
                        if match(command):
                            event.set()
        except OSError:
            pass
        self._cut(client, server)

    @staticmethod
    def _cut(client: socket.socket, server: socket.socket) -> None:
        for s in (client, server):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self.listener.close()
        with self._mutex:
            socks, self._socks = self._socks, []
        for s in socks:
            self._cut(s, s)


def _cut(command: bytes, reply: bytes) -> None:
    return None


def _garble_cas(command: bytes, reply: bytes) -> bytes:
    """``HD c123`` becomes ``HD cX``: the add won, but its CAS cannot be read."""
    assert reply.startswith(b"HD c"), reply
    return b"HD cX\r\n"


def _garble_value(command: bytes, reply: bytes) -> bytes:
    """A value header whose size is not a number."""
    return b"VA X\r\n"


@pytest.fixture
def direct(memcached_url: str) -> Iterator[MemcachedBackend]:
    """The memcached backend straight to the server (fails under CI=true if it is missing)."""
    backend = MemcachedBackend(f"{memcached_url}{'&' if '?' in memcached_url else '?'}prefix=t{SESSION}")
    yield backend
    backend.close()


@pytest.fixture
def proxy(memcached_url: str) -> Iterator[FaultProxy]:
    parts = urlsplit(memcached_url)
    p = FaultProxy(parts.hostname or "127.0.0.1", parts.port or 11211)
    yield p
    p.close()


@pytest.fixture
def faulty(proxy: FaultProxy) -> Iterator[MemcachedBackend]:
    """The same backend (same prefix: same locks) through the fault-injecting proxy."""
    backend = MemcachedBackend(f"memcached://127.0.0.1:{proxy.port}?prefix=t{SESSION}")
    yield backend
    backend.close()


def _is_free(direct: MemcachedBackend, key: str) -> bool:
    try:
        with global_lock(key, backend=direct, lease=5, wait_timeout=0):
            return True
    except LockTimeout:
        return False


def _add_of(mkey: str) -> Callable[[bytes], bool]:
    return lambda command: command.startswith(f"ms {mkey} ".encode()) and b" ME " in command


@pytest.mark.parametrize("fault", [_cut, _garble_cas], ids=["reply-cut", "cas-garbled"])
def test_add_won_but_reply_lost_leaves_the_lock_free(direct: MemcachedBackend, faulty: MemcachedBackend,
                                                     proxy: FaultProxy, key: str, fault: Fault) -> None:
    """The add stores the item, the client never reads a usable reply: it must give the item back."""
    proxy.break_reply(_add_of(direct.safe_key(key)), fault)
    with pytest.raises(BackendUnavailable):
        with global_lock(key, backend=faulty, lease=30, wait_timeout=0, priority="batch"):
            pass
    assert proxy.faulted.is_set()
    faulty.join_give_backs(10)  # given back from a thread: the caller did not wait for it
    assert direct.holder(key) is None
    assert _is_free(direct, key)


def test_batch_step_back_lost_leaves_the_lock_free(direct: MemcachedBackend, faulty: MemcachedBackend,
                                                   proxy: FaultProxy, key: str) -> None:
    """A batch acquirer wins while an interactive waiter is counted, and its step-back never arrives."""
    mkey = direct.safe_key(key)
    conn = direct._conn()
    conn.send(f"ms {mkey}:i 1 T30\r\n1\r\n".encode())   # an interactive waiter is queued
    assert conn.line()[0] == b"HD"
    try:
        proxy.break_reply(lambda command: command.startswith(f"md {mkey} C".encode()), _cut, forward=False)
        with pytest.raises(BackendUnavailable):
            with global_lock(key, backend=faulty, lease=30, wait_timeout=0, priority="batch"):
                pass
        assert proxy.faulted.is_set()
    finally:
        conn.send(f"md {mkey}:i\r\n".encode())
        conn.line()
    faulty.join_give_backs(10)
    assert direct.holder(key) is None
    assert _is_free(direct, key)


def test_waiter_uncount_failure_after_winning_returns_the_lease(
        direct: MemcachedBackend, faulty: MemcachedBackend, proxy: FaultProxy, key: str,
        caplog: pytest.LogCaptureFixture) -> None:
    """An interactive waiter wins; the reply to its counter decrement is garbage: it still holds."""
    ikey = direct.safe_key(key) + ":i"
    counted = proxy.watch(lambda command: command.startswith(f"ma {ikey} ".encode()) and b" D1 " in command)
    proxy.break_reply(lambda command: command.startswith(f"ma {ikey} MD".encode()), _garble_value)
    outcome: list[object] = []
    released = threading.Event()

    def waiter() -> None:
        try:
            with global_lock(key, backend=faulty, lease=30, wait_timeout=10, priority="interactive") as lease:
                outcome.append(lease)
                # held as reported: nobody else can take it
                outcome.append(_is_free(direct, key))
                outcome.append(direct.holder(key))
        except Exception as exc:
            outcome.append(exc)
        finally:
            released.set()

    with caplog.at_level(logging.WARNING, logger="txnsafety.locks"):
        with global_lock(key, backend=direct, lease=30, priority="interactive"):
            t = threading.Thread(target=waiter)
            t.start()
            assert counted.wait(10), "the waiter never counted itself"
        assert released.wait(20)
        t.join()
    assert proxy.faulted.is_set()
    # whatever the waiter was told, the lock is not left held behind its back
    assert direct.holder(key) is None, f"still held after {outcome[0]!r}"
    assert not isinstance(outcome[0], BaseException), outcome[0]
    lease = outcome[0]
    assert outcome[1:] == [False, str(lease.owner)]
    assert _is_free(direct, key)
    assert any("uncount" in r.getMessage() for r in caplog.records)
