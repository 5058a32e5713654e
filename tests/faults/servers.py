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


def free_cluster_port() -> int:
    """A free port whose cluster bus port (+10000) is free and valid too."""
    while True:
        port = free_port()
        if port + 10000 > 65535:
            continue
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 10000))
            return port
        except OSError:
            continue


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

    def __init__(self, workdir: Path, *extra: str, port: int | None = None) -> None:
        super().__init__(workdir)
        self.extra = list(extra)
        if port is not None:
            self.port = port

    def argv(self) -> list[str]:
        return ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
                "--appendonly", "no", "--dir", str(self.workdir), "--protected-mode", "no", *self.extra]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


class OwnSentinel(OwnServer):
    """A Redis Sentinel watching ``master_port`` as ``service`` (quorum 1, fast failover).

    ``down-after-milliseconds`` is 4 s, not the 1 s that would fail over sooner: on a loaded
    2-core machine a live master can miss a second of Sentinel's pings, and a failover before
    the test kills the master puts its "unreplicated" grant on the new master (a CI flake)."""

    what, binary = "redis-sentinel", "redis-server"

    def __init__(self, workdir: Path, master_port: int, service: str = "mymaster") -> None:
        super().__init__(workdir)
        self.conf = workdir / "sentinel.conf"
        self.conf.write_text(
            f"port {self.port}\nbind 127.0.0.1\nprotected-mode no\ndir {workdir}\n"
            f"sentinel monitor {service} 127.0.0.1 {master_port} 1\n"
            f"sentinel down-after-milliseconds {service} 4000\n"
            f"sentinel failover-timeout {service} 5000\n")

    def argv(self) -> list[str]:
        # Debian's redis-sentinel is redis-server under another name
        if shutil.which("redis-sentinel"):
            return ["redis-sentinel", str(self.conf)]
        return ["redis-server", str(self.conf), "--sentinel"]


class OwnMemcached(OwnServer):
    what, binary = "memcached", "memcached"

    def argv(self) -> list[str]:
        user = ["-u", "root"] if os.geteuid() == 0 else []
        return ["memcached", *user, "-l", "127.0.0.1", "-p", str(self.port), "-U", "0", "-m", "64"]

    @property
    def url(self) -> str:
        return f"memcached://127.0.0.1:{self.port}"
