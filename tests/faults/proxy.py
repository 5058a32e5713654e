"""A fault-injecting TCP proxy, for any protocol (Redis, memcached, PostgreSQL).

Faults, each on every connection through the proxy or the next matching one:

* ``stall()`` -- stop forwarding in both directions without a reset: bytes wait
  in the proxy, sockets stay open, new connections are accepted and go nowhere
  (what a dead switch or a paused server looks like to a client); ``resume()``;
* ``cut()`` -- close every connection (both ends see the close);
* ``lose_reply(match)`` -- forward the next request whose bytes ``match``, then
  drop the server's reply and cut that connection: the server did the work, the
  client never learns it (a lost reply);
* ``swallow(match)`` -- cut the connection instead of forwarding the next
  matching request: the server never sees it.

Requests are matched on the bytes of one ``recv`` from the client, which holds
a whole command for the small commands of the lock backends.
"""
from __future__ import annotations

import socket
import threading
from typing import Callable

Match = Callable[[bytes], bool]


class _Link:
    __slots__ = ("client", "server", "lose_next_reply", "closed")

    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.client, self.server = client, server
        self.lose_next_reply = False
        self.closed = False

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for s in (self.client, self.server):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


class FaultProxy:
    """Listens on 127.0.0.1:``port`` and forwards to ``host:upstream_port``."""

    def __init__(self, host: str, upstream_port: int) -> None:
        self.upstream = (host, upstream_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._mutex = threading.Lock()
        self._flowing = threading.Event()
        self._flowing.set()
        self._links: list[_Link] = []
        self._lose: Match | None = None
        self._swallow: Match | None = None
        #: set when an armed lose_reply / swallow fault has happened
        self.faulted = threading.Event()
        self.counts = {"stall": 0, "cut": 0, "lost_reply": 0, "swallowed": 0}
        threading.Thread(target=self._accept, daemon=True, name="fault-proxy").start()

    # -- faults ----------------------------------------------------------------------
    def stall(self) -> None:
        self.counts["stall"] += 1
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def cut(self) -> None:
        self.counts["cut"] += 1
        with self._mutex:
            links, self._links = self._links, []
        for link in links:
            link.close()

    def lose_reply(self, match: Match) -> None:
        self.faulted.clear()
        with self._mutex:
            self._lose = match

    def swallow(self, match: Match) -> None:
        self.faulted.clear()
        with self._mutex:
            self._swallow = match

    # -- plumbing --------------------------------------------------------------------
    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            link = _Link(client, server)
            with self._mutex:
                self._links.append(link)
            threading.Thread(target=self._pump, args=(link, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(link, False), daemon=True).start()

    def _pump(self, link: _Link, upstream: bool) -> None:
        src, dst = (link.client, link.server) if upstream else (link.server, link.client)
        try:
            while data := src.recv(65536):
                self._flowing.wait()
                if link.closed:
                    return
                if upstream:
                    with self._mutex:
                        swallow = self._swallow is not None and self._swallow(data)
                        if swallow:
                            self._swallow = None
                        lose = not swallow and self._lose is not None and self._lose(data)
                        if lose:
                            self._lose = None
                            link.lose_next_reply = True
                    if swallow:
                        self.counts["swallowed"] += 1
                        self.faulted.set()
                        break
                elif link.lose_next_reply:
                    self.counts["lost_reply"] += 1
                    self.faulted.set()
                    break
                dst.sendall(data)
        except OSError:
            pass
        link.close()

    def close(self) -> None:
        self._flowing.set()
        self.listener.close()
        self.cut()
