"""The Redis lock on a real three-node Redis Cluster (``redis+cluster://``), on loopback.

Every key of one lock shares a hash tag, so each script runs on the one node that
owns the lock's slot; different locks live on different nodes.  Exclusion,
handoff to a blocked waiter (BLPOP on that node), fences and async all work
through redis-py's ``RedisCluster``.
"""
from __future__ import annotations

import asyncio
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest
import redis

from tests.faults.servers import OwnRedis, free_cluster_port
from txnsafety.locks import LockTimeout, backend_from_url, global_lock


class Cluster:
    def __init__(self, tmp: Path) -> None:
        self.nodes = []
        for i in range(3):
            (tmp / f"n{i}").mkdir()
            self.nodes.append(OwnRedis(tmp / f"n{i}", "--cluster-enabled", "yes", "--cluster-config-file",
                                       "nodes.conf", "--cluster-node-timeout", "2000",
                                       port=free_cluster_port()).start())
        subprocess.run(["redis-cli", "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in self.nodes),
                        "--cluster-replicas", "0", "--cluster-yes"], check=True, capture_output=True, timeout=60)
        deadline = time.monotonic() + 30
        while not all(b"cluster_state:ok" in redis.Redis(port=n.port).execute_command("CLUSTER", "INFO")
                      for n in self.nodes):
            assert time.monotonic() < deadline, "the cluster did not become ok"
            time.sleep(0.05)
        self.url = f"redis+cluster://127.0.0.1:{self.nodes[0].port}?timeout=2&prefix=c{uuid.uuid4().hex[:6]}"

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    yield c
    c.stop()


def test_locks_on_a_three_node_cluster(cluster: Cluster) -> None:
    backend = backend_from_url(cluster.url)
    assert backend.name.startswith("redis+cluster://127.0.0.1:")
    keys = [f"user:{i}" for i in range(24)]
    nodes = {backend.client.get_node_from_key(backend.keys_for(k)[0][0]).port for k in keys}
    assert len(nodes) == 3, "the locks should spread over every node"
    for k in keys:
        fences = []
        for _ in range(2):
            with global_lock(k, backend=backend, lease=5, wait_timeout=1) as lease:
                fences.append(lease.fence)
                with pytest.raises(LockTimeout):
                    with global_lock(k, backend=cluster.url, wait_timeout=0):
                        pass
        assert fences[1] > fences[0]
    backend.close()


def test_handoff_and_exclusion_on_the_cluster(cluster: Cluster) -> None:
    backend = backend_from_url(cluster.url)
    counter = {"n": 0}
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            for _ in range(10):
                with global_lock("shared", backend=cluster.url, lease=10, wait_timeout=20,
                                 priority="interactive"):
                    n = counter["n"]
                    time.sleep(0.001)
                    counter["n"] = n + 1
        except BaseException as exc:  # noqa: B036 - reported below
            errors.append(exc)
    threads = [threading.Thread(target=worker) for _ in range(4)]
    with global_lock("shared", backend=backend, lease=10):     # everyone queues behind this one
        for t in threads:
            t.start()
        time.sleep(0.2)
    for t in threads:
        t.join(60)
    assert not errors and counter["n"] == 40

    async def main() -> list[int]:
        fences = []
        for _ in range(3):
            async with global_lock("async-key", backend=backend, lease=5) as lease:
                fences.append(lease.fence)
        return fences
    fences = asyncio.run(main())
    assert fences == sorted(fences) and len(set(fences)) == 3
    backend.close()
