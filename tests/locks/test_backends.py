"""Backend-specific behaviour: Redis keys and wake-ups, memcached keys and eviction,
PostgreSQL key hashing and sessions."""
from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from redis.crc import key_slot

from txnsafety.locks import LeaseLost, LeaseState, LockTimeout, get_backend, global_lock, user_write_lock
from txnsafety.locks import redis_scripts

ROOT = Path(__file__).resolve().parents[2]


# -- wake-ups, not polling -------------------------------------------------------------

@pytest.mark.parametrize("name", ["memory", "redis", "postgresql"])
def test_handoff_is_a_wakeup_not_a_poll(name: str, key: str, request) -> None:
    from tests.locks.conftest import backend_url
    url = backend_url(name, request)
    if name == "redis":
        url = url.replace("recheck=0.5", "recheck=5")  # a poll would take seconds
    holding = threading.Event()
    released_at: list[float] = []

    def holder() -> None:
        with global_lock(key, backend=url, lease=10, priority="interactive") as lease:
            holding.set()
            time.sleep(0.2)  # hold for a measured duration while the waiter blocks
            lease.backend.release(lease)   # release, and take the time right after
            released_at.append(time.monotonic())
            lease.state = LeaseState.RELEASED

    t = threading.Thread(target=holder)
    t.start()
    assert holding.wait(5)
    with global_lock(key, backend=url, wait_timeout=5, priority="interactive"):
        got = time.monotonic()
    t.join()
    assert got - released_at[0] < 0.05


# -- Redis -------------------------------------------------------------------------------

@pytest.mark.parametrize("lock_key", ["plain", "with{brace}", "{", "}", "", "a" * 300, "ünï cödé\n"])
def test_redis_keys_of_one_lock_share_a_cluster_slot(redis_url: str, lock_key: str) -> None:
    backend = get_backend(redis_url)
    keys, sig = backend.keys_for(lock_key)
    slots = {key_slot(k.encode()) for k in keys + [sig + "0" * 32]}
    assert len(slots) == 1
    assert len(set(keys)) == 5


@pytest.mark.parametrize("lock_key", ["with{brace}", "", "a" * 300])
def test_redis_odd_keys_lock(redis_url: str, lock_key: str, key: str) -> None:
    with global_lock(key + lock_key, backend=redis_url, lease=5):
        with pytest.raises(LockTimeout):
            with global_lock(key + lock_key, backend=redis_url, wait_timeout=0):
                pass


def test_redis_scripts_never_scan() -> None:
    for name in ("ACQUIRE", "RELEASE", "EXTEND", "CANCEL"):
        text = getattr(redis_scripts, name).upper()
        assert "'KEYS'" not in text and "'SCAN'" not in text


def test_redis_waiter_killed_while_queued_does_not_block(redis_url: str, key: str, tmp_path: Path) -> None:
    """A waiter kill -9'd in the queue is handed the lock but never claims it; the next one gets it."""
    url = redis_url + "&recheck=0.3&claim=0.5" if "?" in redis_url else redis_url + "?recheck=0.3&claim=0.5"
    backend = get_backend(url)
    keys, _ = backend.keys_for(key)
    with global_lock(key, backend=url, lease=10, priority="interactive"):
        code = ("import sys; from txnsafety.locks import global_lock; "
                f"print('waiting', flush=True); "
                f"global_lock({key!r}, backend={url!r}, wait_timeout=30, priority='interactive').__enter__()")
        proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "waiting"
        deadline = time.monotonic() + 10
        while backend.client.zcard(keys[2]) < 1:   # wait until it is queued
            assert time.monotonic() < deadline
            time.sleep(0.01)
        proc.kill()
        proc.wait()
        result: list[float] = []

        def second() -> None:
            t0 = time.monotonic()
            with global_lock(key, backend=url, wait_timeout=10, priority="interactive"):
                result.append(time.monotonic() - t0)

        t = threading.Thread(target=second)
        t.start()
        while backend.client.zcard(keys[2]) < 2:
            time.sleep(0.01)
    # released: handed to the dead waiter first, which never claims it
    t.join()
    assert result and result[0] < 3.0


def test_redis_fence_counter(redis_url: str, key: str) -> None:
    backend = get_backend(redis_url)
    with global_lock(key, backend=redis_url) as a:
        assert backend.fence_of(key) == a.fence
    with global_lock(key, backend=redis_url) as b:
        assert b.fence > a.fence
        assert backend.fence_of(key) == b.fence


def test_redis_async_releases_on_cancel_after_handoff(redis_url: str, key: str) -> None:
    import asyncio

    async def main() -> None:
        async with global_lock(key, backend=redis_url, lease=5, priority="interactive"):
            waiter = asyncio.create_task(_hold(redis_url, key))
            backend = get_backend(redis_url)
            keys, _ = backend.keys_for(key)
            while backend.client.zcard(keys[2]) < 1:
                await asyncio.sleep(0.005)
        # the lock was handed to the waiter; cancel it before/after it claims
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        async with global_lock(key, backend=redis_url, wait_timeout=2, priority="interactive"):
            pass

    asyncio.run(main())


async def _hold(url: str, key: str) -> None:
    import asyncio
    async with global_lock(key, backend=url, lease=5, wait_timeout=10, priority="interactive"):
        await asyncio.sleep(30)


# -- memcached ---------------------------------------------------------------------------

ODD_KEYS = ["with space", "tab\there", "new\nline", "ctl\x01\x7f", "", "é ü 中文", "x" * 300, "a:b/c?d",
            "\r\n"]


def _raw(url: str, command: bytes) -> bytes:
    from urllib.parse import urlsplit
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port)) as s:
        s.sendall(command)
        return s.recv(4096)


def test_memcached_safe_keys(memcached_url: str) -> None:
    backend = get_backend(memcached_url)
    made = {backend.safe_key(k) for k in ODD_KEYS + ["plain"]}
    assert len(made) == len(ODD_KEYS) + 1
    for k in made:
        raw = k.encode()
        assert len(raw) + 2 <= 250 and all(33 <= b <= 126 for b in raw)
    assert backend.safe_key("plain").endswith(":k:plain")


@pytest.mark.parametrize("lock_key", ODD_KEYS)
def test_memcached_odd_keys_lock_and_exclude(memcached_url: str, key: str, lock_key: str) -> None:
    with global_lock(key + lock_key, backend=memcached_url, lease=5) as lease:
        assert lease.backend.is_held(lease)
        with pytest.raises(LockTimeout):
            with global_lock(key + lock_key, backend=memcached_url, wait_timeout=0):
                pass
        # a different odd key is a different lock
        with global_lock(key + lock_key + " ", backend=memcached_url, wait_timeout=0):
            pass


def test_memcached_eviction_is_a_lost_lease(memcached_url: str, key: str, txnsafety_violations) -> None:
    backend = get_backend(memcached_url)
    with global_lock(key, backend=memcached_url, lease=5) as lease:
        assert _raw(memcached_url, f"md {backend.safe_key(key)}\r\n".encode()) == b"HD\r\n"  # evicted
        with pytest.raises(LeaseLost):
            lease.ensure_held(check_backend=True)
        assert lease.state is LeaseState.LOST
    assert txnsafety_violations.codes() == ["TXN104"]


def test_memcached_extend_after_eviction_is_refused(memcached_url: str, key: str,
                                                    txnsafety_violations) -> None:
    backend = get_backend(memcached_url)
    with global_lock(key, backend=memcached_url, lease=5) as lease:
        _raw(memcached_url, f"md {backend.safe_key(key)}\r\n".encode())
        with pytest.raises(LeaseLost):
            lease.extend()
    assert txnsafety_violations.codes() == ["TXN104"]


def test_memcached_fence_grows_after_counter_eviction(memcached_url: str, key: str) -> None:
    backend = get_backend(memcached_url)
    with global_lock(key, backend=memcached_url) as a:
        pass
    _raw(memcached_url, f"md {backend.safe_key(key)}:f\r\n".encode())
    with global_lock(key, backend=memcached_url) as b:
        pass
    assert b.fence > a.fence


def test_memcached_ttl_never_ends_before_local_deadline(memcached_url: str, key: str) -> None:
    with global_lock(key, backend=memcached_url, lease=0.3) as lease:
        reply = _raw(memcached_url, f"mg {lease.backend.safe_key(key)} t\r\n".encode())
        ttl = int(reply.split()[1][1:])
        assert ttl >= 1


# -- PostgreSQL --------------------------------------------------------------------------

def test_postgres_key_hash_is_stable() -> None:
    from txnsafety.locks.postgres_backend import key_hash
    assert key_hash("user:42") == key_hash("user:42")
    out = subprocess.run([sys.executable, "-c", "from txnsafety.locks.postgres_backend import key_hash; "
                          "print(key_hash('user:42'))"], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "123", "PATH": ""}, cwd=ROOT).stdout
    assert int(out) == key_hash("user:42")
    assert -(2 ** 63) <= key_hash("x") < 2 ** 63


def test_postgres_holder_is_named_in_timeout(postgres_url: str, key: str) -> None:
    with user_write_lock(key, backend=postgres_url, lease=5) as lease:
        with pytest.raises(LockTimeout) as info:
            with global_lock("user:" + key, backend=postgres_url, wait_timeout=0.2):
                pass
        assert f"pid {lease.owner.pid}" in str(info.value)


def test_postgres_transaction_scope_runs_in_one_transaction(postgres_url: str, key: str) -> None:
    url = postgres_url + ("&" if "?" in postgres_url else "?") + "scope=transaction"
    with global_lock(key, backend=url, lease=5) as lease:
        conn = lease.handle
        assert conn.info.transaction_status.name == "INTRANS"
        # the lock is transaction-level, and no session-level lock is left behind
        rows = conn.execute("SELECT mode, granted FROM pg_locks WHERE locktype = 'advisory' "
                            "AND pid = pg_backend_pid()").fetchall()
        assert rows == [("ExclusiveLock", True)]
    assert conn.info.transaction_status.name == "IDLE"
