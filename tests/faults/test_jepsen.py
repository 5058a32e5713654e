"""The fault suite: clients incrementing a counter under a lock while a nemesis strikes.

One run per backend (about 17 s each), judged by lost, duplicated and unfenced
writes and fences going backwards -- all must be 0.  The counts are printed
(``python -m pytest -s tests/faults/test_jepsen.py``) and, when
``TXNSAFETY_FAULT_REPORT`` names a file, appended to it as JSON lines.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
import redis

from tests.faults.conftest import through
from tests.faults.jepsen import Outcome, Run, Target
from tests.faults.proxy import FaultProxy
from tests.faults.servers import OwnMemcached, OwnRedis
from txnsafety.locks.memcached_backend import MemcachedBackend
from txnsafety.locks.redis_backend import RedisBackend


def _record(outcome: Outcome) -> None:
    print("\nfault suite:", outcome.line())
    path = os.environ.get("TXNSAFETY_FAULT_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(outcome.as_dict()) + "\n")


def _redis_target(tmp_path: Path, held: list) -> Target:  # noqa: ANN001
    server = OwnRedis(tmp_path).start()
    proxy = FaultProxy("127.0.0.1", server.port)
    held += [proxy, server]

    def evict(key: str) -> None:
        lock_key = RedisBackend(server.url).keys_for(key)[0][0]
        redis.Redis(port=server.port).delete(lock_key)
    return Target("redis", through(proxy, server.url) + "?timeout=1", proxy, server.url, server=server,
                  evict=evict)


def _memcached_target(tmp_path: Path, held: list) -> Target:  # noqa: ANN001
    server = OwnMemcached(tmp_path).start()
    proxy = FaultProxy("127.0.0.1", server.port)
    held += [proxy, server]

    def evict(key: str) -> None:
        direct = MemcachedBackend(server.url)
        try:
            conn = direct._conn()
            conn.send(f"md {direct.safe_key(key)}\r\n".encode())
            conn.line()
        finally:
            direct.close()
    return Target("memcached", through(proxy, server.url) + "?timeout=1", proxy, server.url, server=server,
                  evict=evict)


def _postgres_target(postgres_url: str, scope: str, held: list) -> Target:  # noqa: ANN001
    parts = urlsplit(postgres_url)
    proxy = FaultProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    held.append(proxy)
    url = through(proxy, postgres_url)
    url += f"{'&' if '?' in url else '?'}timeout=2&scope={scope}"

    def kill_sessions(pids: list[int]) -> None:
        """pg_terminate_backend on our clients' lock sessions (named after their owner, pid included)."""
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            for pid in pids:
                conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                             "WHERE application_name LIKE %s", (f"% pid {pid}",))
    return Target(f"postgresql ({scope} scope)", url, proxy, postgres_url, kill_sessions=kill_sessions)


@pytest.mark.parametrize("backend", ["redis", "memcached", "postgresql", "postgresql-xact"])
def test_no_lost_duplicated_or_unfenced_writes_under_faults(backend: str, tmp_path: Path,
                                                            request: pytest.FixtureRequest) -> None:
    held: list = []
    try:
        if backend == "redis":
            target = _redis_target(tmp_path, held)
        elif backend == "memcached":
            target = _memcached_target(tmp_path, held)
        else:
            target = _postgres_target(request.getfixturevalue("postgres_url"),
                                      "transaction" if backend.endswith("xact") else "session", held)
        run = Run(target, tmp_path)
        outcome = run.run()
    finally:
        for thing in held:
            (thing.close if isinstance(thing, FaultProxy) else thing.stop)()
    _record(outcome)
    assert (outcome.lost, outcome.duplicated, outcome.unfenced, outcome.fences_backwards) == (0, 0, 0, 0), \
        outcome.line()
    assert outcome.acknowledged > 0 and outcome.grants > outcome.acknowledged // 2, outcome.line()
    assert set(outcome.faults) == run.fault_names(), outcome.line()
