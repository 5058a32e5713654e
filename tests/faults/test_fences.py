"""Fences never go backwards, even when the lock server restarts and loses everything.

A fenced store remembers the highest fence it saw.  If fences restarted from a
low number after a Redis or memcached restart, every write of the next holders
would be refused (a sole holder locked out) -- or, with equal numbers, a stale
holder's write would pass as the new holder's.  docs/locks.md gives the argument.
"""
from __future__ import annotations

import uuid

from tests.faults.servers import OwnServer
from tests.locks.fenced_store import FencedStore
from txnsafety.locks import BackendUnavailable, backend_from_url, global_lock


def _fence(backend, key: str) -> int:  # noqa: ANN001
    for _ in range(3):  # the first command after a restart may meet a dead connection
        try:
            with global_lock(key, backend=backend, lease=5, wait_timeout=2) as lease:
                return lease.fence
        except BackendUnavailable:
            continue
    raise AssertionError("the restarted server never answered")


def test_fences_after_a_restart_exceed_every_fence_before(own_server: OwnServer, tmp_path) -> None:  # noqa: ANN001
    backend = backend_from_url(own_server.url)
    keys = [f"f-{uuid.uuid4().hex[:8]}" for _ in range(3)]
    store = FencedStore(str(tmp_path / "store"))
    before: dict[str, list[int]] = {k: [] for k in keys}
    for _ in range(20):
        for k in keys:
            before[k].append(_fence(backend, k))
    assert all(f == sorted(f) and len(set(f)) == len(f) for f in before.values())
    assert store.write(max(before[keys[0]]), "last write before the restart")
    for restart in range(2):
        own_server.restart()
        for k in keys:
            after = _fence(backend, k)
            assert after > max(before[k]), (restart, k, after, max(before[k]))
            before[k].append(after)
        # the sole holder after the restart is not locked out of the store
        assert store.write(before[keys[0]][-1], f"write after restart {restart}")
    backend.close()
