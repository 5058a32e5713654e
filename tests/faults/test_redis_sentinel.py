"""The Redis lock behind Sentinel: ``redis+sentinel://`` follows a real failover.

Our own master, replica and redis-sentinel on loopback.  The master is killed
(kill -9); Sentinel promotes the replica; the lock keeps working on the new
master, and fences keep growing -- even for grants the replica never received,
because a fence is at least the new master's clock in microseconds.  What a
failover does *not* keep is mutual exclusion for a lock granted but not yet
replicated: the test shows a second holder getting it, and the first one
learning it with ``ensure_held(check_backend=True)`` (docs/locks.md).
"""
from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest
import redis

from tests.faults.proxy import FaultProxy
from tests.faults.servers import OwnRedis, OwnSentinel
from txnsafety.locks import BackendUnavailable, LeaseLost, LockTimeout, backend_from_url, global_lock


class SentinelSetup:
    def __init__(self, tmp: Path) -> None:
        (tmp / "m").mkdir()
        (tmp / "r").mkdir()
        (tmp / "s").mkdir()
        self.master = OwnRedis(tmp / "m").start()
        # the replica replicates through a proxy, so that a test can hold the stream back
        self.link = FaultProxy("127.0.0.1", self.master.port)
        self.replica = OwnRedis(tmp / "r", "--replicaof", "127.0.0.1", str(self.link.port)).start()
        self.sentinel = OwnSentinel(tmp / "s", self.master.port).start()
        self.url = (f"redis+sentinel://127.0.0.1:{self.sentinel.port}/mymaster/0"
                    f"?timeout=1&prefix=s{uuid.uuid4().hex[:6]}")
        self._until(lambda: redis.Redis(port=self.master.port).info("replication")["connected_slaves"] == 1)
        self._until(lambda: len(self._ask("SENTINEL", "REPLICAS", "mymaster")) == 1)

    def _ask(self, *command: str):  # noqa: ANN202
        return redis.Redis(port=self.sentinel.port).execute_command(*command)

    def master_port(self) -> int:
        return int(self._ask("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster")[1])

    @staticmethod
    def _until(check, timeout: float = 30.0) -> None:  # noqa: ANN001
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if check():
                    return
            except redis.RedisError:
                pass
            time.sleep(0.05)
        raise AssertionError("the sentinel setup did not settle")

    def stop(self) -> None:
        for server in (self.sentinel, self.replica, self.master):
            server.stop()
        self.link.close()


@pytest.fixture
def sentinel_setup(tmp_path: Path) -> Iterator[SentinelSetup]:
    setup = SentinelSetup(tmp_path)
    yield setup
    setup.stop()


def _acquire_through_failover(backend, key: str, **options):  # noqa: ANN001, ANN202
    """Enter the lock, retrying while the failover is under way (BackendUnavailable)."""
    deadline = time.monotonic() + 30
    while True:
        ctx = global_lock(key, backend=backend, **options)
        try:
            return ctx, ctx.__enter__()
        except BackendUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_lock_follows_a_sentinel_failover(sentinel_setup: SentinelSetup) -> None:
    backend = backend_from_url(sentinel_setup.url)
    assert backend.name.startswith("redis+sentinel://127.0.0.1:") and "mymaster" in backend.name
    old_master = sentinel_setup.master.port
    fences = []
    for _ in range(5):
        with global_lock("acct", backend=backend, lease=5) as lease:
            fences.append(lease.fence)
    # held now, and replicated (WAIT): it survives the failover
    ctx, held = _acquire_through_failover(backend, "held", lease=60)
    assert redis.Redis(port=old_master).execute_command("WAIT", 1, 5000) == 1

    # a grant the replica never receives: the replication stream is held back, and
    # dropped when the master dies (asynchronous replication)
    sentinel_setup.link.stall()
    lost_ctx, unreplicated = _acquire_through_failover(backend, "unreplicated", lease=60)
    # the grant must be on the master about to die: a failover already under way would put
    # it on the survivor, and the test would show nothing about unreplicated grants
    assert sentinel_setup.master_port() == old_master, "Sentinel failed over before the kill"
    sentinel_setup.master.kill9()
    sentinel_setup.link.cut()
    sentinel_setup.link.resume()
    sentinel_setup._until(lambda: sentinel_setup.master_port() == sentinel_setup.replica.port)

    # the lock works on the new master, fences keep growing
    with _acquire_through_failover(backend, "acct", lease=5)[0] as after:
        assert after.fence > max(fences)
    # a replicated lock is still held across the failover ...
    with pytest.raises(LockTimeout):
        with global_lock("held", backend=backend, wait_timeout=0):
            pass
    held.ensure_held(check_backend=True)
    ctx.__exit__(None, None, None)
    # ... an unreplicated one is not: a second holder gets it, with a higher fence,
    # and the first learns it from the backend
    with global_lock("unreplicated", backend=backend, wait_timeout=0) as second:
        assert second.fence > unreplicated.fence
        with pytest.raises(LeaseLost):
            unreplicated.ensure_held(check_backend=True)
    backend.close()
