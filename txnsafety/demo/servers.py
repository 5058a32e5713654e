"""Real HTTP servers in a thread: a threaded WSGI server (wsgiref) and uvicorn.

Both bind their socket before the function returns, so a client may connect at
once: the kernel's backlog holds the connection until the server accepts it —
no readiness polling or sleeps.  The demo serves the lab with them; the tests
serve their apps with them too.
"""
from __future__ import annotations

import asyncio
import socket
import threading
from contextlib import contextmanager
from socketserver import ThreadingMixIn
from typing import Any, Iterator
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def wsgi_server(app: Any) -> Iterator[str]:
    """Serve ``app`` with one thread per request; yields the base URL."""
    server = make_server("127.0.0.1", 0, app, server_class=_ThreadingWSGIServer, handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@contextmanager
def asgi_server(app: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn (one asyncio task per request); yields the base URL."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
