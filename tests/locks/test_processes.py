"""Several processes on the real servers: exclusion, kill -9, a paused holder, fencing."""
from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.locks.fenced_store import FencedStore
from txnsafety.locks import backend_from_url, global_lock

ROOT = Path(__file__).resolve().parents[2]
N_PROCS, ROUNDS = 4, 15


def _bump(fd: int) -> None:
    """An unguarded read-modify-write of a counter in a file (fixed-width, no truncation)."""
    value = int(os.pread(fd, 20, 0) or b"0")
    time.sleep(0.0005)
    os.pwrite(fd, b"%20d" % (value + 1), 0)


def _worker(url: str, key: str, path: str, use_lock: bool, barrier) -> None:  # noqa: ANN001
    # A fresh backend: never reuse connections inherited through fork.
    backend = backend_from_url(url) if use_lock else None
    fd = os.open(path, os.O_RDWR)
    barrier.wait()
    for _ in range(ROUNDS):
        if use_lock:
            with global_lock(key, backend=backend, lease=10, wait_timeout=30, priority="interactive"):
                _bump(fd)
        else:
            _bump(fd)
    os.close(fd)
    if backend is not None:
        backend.close()


def _run_counter(url: str, key: str, tmp_path: Path, use_lock: bool) -> int:
    path = tmp_path / f"counter-{use_lock}"
    path.write_bytes(b"%20d" % 0)
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(N_PROCS)
    procs = [ctx.Process(target=_worker, args=(url, key, str(path), use_lock, barrier))
             for _ in range(N_PROCS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    return int(path.read_bytes())


def test_lost_update_without_lock_none_with_it(server_url: str, key: str, tmp_path: Path) -> None:
    unguarded = _run_counter(server_url, key, tmp_path, use_lock=False)
    assert unguarded < N_PROCS * ROUNDS, "the unguarded counter should lose updates"
    guarded = _run_counter(server_url, key, tmp_path, use_lock=True)
    assert guarded == N_PROCS * ROUNDS


def _spawn_holder(url: str, key: str, lease: float, store: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "tests.locks.holder", url, key, str(lease), str(store)],
                            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.startswith("HELD "), line
    proc.fence = int(line.split()[1])  # type: ignore[attr-defined]
    return proc


def _lease_for(url: str) -> float:
    return 1.0 if url.startswith("memcached") else 0.6


def test_kill_9_holder_recovers_within_lease(server_url: str, key: str, tmp_path: Path) -> None:
    lease = _lease_for(server_url)
    proc = _spawn_holder(server_url, key, lease, tmp_path / "store")
    with global_lock("warm-up-" + key, backend=server_url):  # connect before timing
        pass
    try:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(5)
        t0 = time.monotonic()
        with global_lock(key, backend=server_url, wait_timeout=10, priority="interactive") as mine:
            recovery = time.monotonic() - t0
            assert mine.fence > proc.fence
    finally:
        proc.kill()
    # memcached rounds the TTL up to whole seconds, plus one
    limit = lease + 2.5 if server_url.startswith("memcached") else lease + 0.5
    assert recovery < limit
    if server_url.startswith("postgresql"):
        assert recovery < 0.3  # the session died with the process: released at once


def test_paused_holder_late_write_is_fenced(server_url: str, key: str, tmp_path: Path) -> None:
    """SIGSTOP a holder past its lease: the next holder gets a higher fence, the late write is refused."""
    store = FencedStore(str(tmp_path / "store"))
    proc = _spawn_holder(server_url, key, _lease_for(server_url), tmp_path / "store")
    try:
        os.kill(proc.pid, signal.SIGSTOP)
        with global_lock(key, backend=server_url, wait_timeout=10, priority="interactive") as mine:
            assert mine.fence > proc.fence
            assert store.write(mine.fence, "current holder's write")
            os.kill(proc.pid, signal.SIGCONT)
            proc.stdin.write("go\n")
            proc.stdin.flush()
            lines = [proc.stdout.readline().strip() for _ in range(3)]
            assert mine.backend.is_held(mine)   # the late holder did not release our lock
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait(5)
    assert lines == ["WRITE rejected", "LIVE no", "REPORTED TXN104"]
    assert store.read()["value"] == "current holder's write"
