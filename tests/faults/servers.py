"""Servers of the fault suite's own: started on free loopback ports in a temp dir.

Faults kill, pause and restart servers, so they never touch the shared servers of
``.ci/servers``: each test gets its own ``redis-server`` or ``memcached`` from the
same Debian packages, with nothing persisted (a restart loses all state).
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from tests import servers as shared


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} on port {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"{what} did not listen on port {port}")


class OwnServer:
    """One server process on a fixed port that can be killed, paused and restarted."""

    what = "?"
    binary = "?"

    def __init__(self, workdir: Path) -> None:
        if shutil.which(self.binary) is None:
            shared.missing(f"{self.binary} is not installed; `bash .ci/servers` installs it")
        self.workdir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.restarts = 0

    def argv(self) -> list[str]:
        raise NotImplementedError

    @property
    def url(self) -> str:
        raise NotImplementedError

    def start(self) -> "OwnServer":
        self.proc = subprocess.Popen(self.argv(), cwd=self.workdir, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        _wait_port(self.port, self.proc, self.what)
        return self

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def restart(self) -> None:
        """kill -9 and start again on the same port: every key is gone."""
        self.kill9()
        self.restarts += 1
        self.start()

    def pause(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self.kill9()


class OwnRedis(OwnServer):
    what, binary = "redis-server", "redis-server"

    def argv(self) -> list[str]:
        return ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
                "--appendonly", "no", "--dir", str(self.workdir), "--protected-mode", "no"]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


class OwnMemcached(OwnServer):
    what, binary = "memcached", "memcached"

    def argv(self) -> list[str]:
        user = ["-u", "root"] if os.geteuid() == 0 else []
        return ["memcached", *user, "-l", "127.0.0.1", "-p", str(self.port), "-U", "0", "-m", "64"]

    @property
    def url(self) -> str:
        return f"memcached://127.0.0.1:{self.port}"
