"""The Redis handoff: the waiter's BLPOP and its claim travel in one write.

What that changes, shown on the real server: the claim runs on the server as soon
as the release hands the lock over, without the waiter's process doing anything
(a stopped waiter still ends up holding its full lease); and a grant that
arrives late in a long wait still gets its whole lease on the client's clock.
"""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from txnsafety.locks import close_backends, get_backend, global_lock

ROOT = Path(__file__).resolve().parents[2]


def _url(redis_url: str, **query: str) -> str:
    sep = "&" if "?" in redis_url else "?"
    return redis_url + sep + "&".join(f"{k}={v}" for k, v in query.items())


def _blocked(client, name: str) -> bool:
    """True when the connection named ``name`` is blocked (in BLPOP) on the server."""
    return any(c.get("name") == name and "b" in c.get("flags", "") for c in client.client_list())


def test_the_claim_runs_on_the_server_while_the_waiter_sleeps(redis_url: str, key: str) -> None:
    """Release with the waiter's process stopped: the lease is already the waiter's full one.

    Sent one after the other, the claim waits for the waiter to wake up and send it:
    until then the handed-over lock carries only ``claim`` (0.5 s) of lease.
    """
    name = "txnsafety-test-" + key
    url = _url(redis_url, prefix="hand", recheck="5", claim="0.5", client_name=name)
    backend = get_backend(url)
    keys, _ = backend.keys_for(key)
    code = ("import sys; from txnsafety.locks import global_lock\n"
            f"with global_lock({key!r}, backend={url!r}, lease=20, wait_timeout=30) as lease:\n"
            "    print('HELD', lease.fence, flush=True)\n"
            "    sys.stdin.readline()\n")
    stopped = False
    with global_lock(key, backend=backend, lease=10) as mine:
        proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 10
            while not _blocked(backend.client, name):   # queued and in BLPOP
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.01)
            os.kill(proc.pid, signal.SIGSTOP)
            stopped = True
        except BaseException:
            proc.kill()
            raise
    try:
        token = backend.client.hget(keys[0], "token")
        assert token is not None and token.decode() != mine.token   # handed to the waiter
        assert backend.client.pttl(keys[0]) > 10_000                  # its full 20 s lease, claimed
    finally:
        if stopped:
            os.kill(proc.pid, signal.SIGCONT)
        held = proc.stdout.readline().split()
        proc.stdin.write("\n")
        proc.stdin.close()
        proc.wait(10)
    assert held[0] == "HELD" and int(held[1]) == backend.fence_of(key) > mine.fence


def test_a_grant_late_in_a_long_wait_gets_its_whole_lease(redis_url: str, key: str) -> None:
    """A 1 s lease handed over 0.4 s into the waiter's BLPOP: the client's deadline is a
    full second after the grant (not 0.6 s, counted from when the BLPOP was sent), and
    the server's lease is no shorter than the client's."""
    url = _url(redis_url, prefix="hand", recheck="5")
    backend = get_backend(url)
    keys, _ = backend.keys_for(key)
    holding = threading.Event()
    released_at: list[float] = []

    def holder() -> None:
        with global_lock(key, backend=backend, lease=10):
            holding.set()
            time.sleep(0.4)  # the waiter's BLPOP has been waiting this long at the handoff
            released_at.append(time.monotonic())

    t = threading.Thread(target=holder)
    t.start()
    assert holding.wait(5)
    with global_lock(key, backend=backend, lease=1.0, wait_timeout=5) as lease:
        got = time.monotonic()
        server_left = backend.client.pttl(keys[0]) / 1000.0
        checked = time.monotonic()
    t.join()
    assert got - released_at[0] < 0.3
    assert lease.deadline - released_at[0] > 0.9
    assert server_left + 0.001 >= lease.deadline - checked   # PTTL is whole milliseconds


def test_short_waits_take_the_writes_time() -> None:
    """The common case (a wait short beside the lease) costs no extra round trip."""
    from txnsafety.locks import redis_wait
    sent = time.monotonic()
    assert redis_wait.lease_start(sent, 30.0) == sent
    assert redis_wait.lease_start(sent - 1.0, 1.0) is None


@pytest.fixture
def make_proxy() -> Iterator:
    from tests.faults.proxy import FaultProxy
    made: list = []
    yield lambda host, port: made.append(FaultProxy(host, port)) or made[-1]
    for proxy in made:
        proxy.close()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[str]:
    """A redis-server of this test's own (SCRIPT FLUSH would hit everyone's scripts)."""
    from tests.faults.servers import OwnRedis
    server = OwnRedis(tmp_path).start()
    yield server.url
    close_backends()
    server.stop()


@pytest.mark.parametrize("asynchronous", [False, True])
def test_handoff_after_the_server_lost_its_scripts(own_redis: str, key: str, asynchronous: bool) -> None:
    """SCRIPT FLUSH while a waiter is blocked: its pipelined claim answers NOSCRIPT and
    is sent again with the script; the waiter gets the lock at the release."""
    name = "txnsafety-test-" + key
    backend = get_backend(_url(own_redis, recheck="5", client_name=name))
    got: list[int] = []

    def waiter() -> None:
        if asynchronous:
            async def take() -> None:
                async with global_lock(key, backend=backend, lease=5, wait_timeout=10) as lease:
                    got.append(lease.fence)
            asyncio.run(take())
        else:
            with global_lock(key, backend=backend, lease=5, wait_timeout=10) as lease:
                got.append(lease.fence)

    with global_lock(key, backend=backend, lease=10):
        t = threading.Thread(target=waiter)
        t.start()
        deadline = time.monotonic() + 10
        while not _blocked(backend.client, name):   # its claim is on the server, behind the BLPOP
            assert t.is_alive() and time.monotonic() < deadline
            time.sleep(0.01)
        backend.client.script_flush()
        released = time.monotonic()
    t.join(10)
    assert got and got[0] == backend.fence_of(key)
    assert time.monotonic() - released < 2.0


def _contend(backend, key: str, waiter_backend) -> None:
    """Hold ``key`` on ``backend`` until ``waiter_backend`` has queued for it, then release."""
    keys, _ = backend.keys_for(key)
    with global_lock(key, backend=backend, lease=10):
        waiter = threading.Thread(target=_take_and_release, args=(waiter_backend, key))
        waiter.start()
        deadline = time.monotonic() + 10
        while backend.client.zcard(keys[2]) + backend.client.zcard(keys[3]) < 1:   # queued
            assert waiter.is_alive() and time.monotonic() < deadline
            time.sleep(0.01)
    waiter.join(10)


def _take_and_release(backend, key: str) -> None:
    with global_lock(key, backend=backend, lease=5, wait_timeout=10):
        pass


def test_a_key_seen_contended_is_queued_waited_for_and_claimed_in_one_write(
        own_redis: str, key: str, make_proxy) -> None:
    """The second contended acquire of a key by one backend: ACQUIRE, BLPOP and claim in
    one write (the first one sends ACQUIRE, waits for its reply, then BLPOP and claim)."""
    port = int(own_redis.rsplit(":", 1)[1].split("/")[0])
    proxy = make_proxy("127.0.0.1", port)
    writes: list[bytes] = []
    proxy.swallow(lambda data: writes.append(data) and False)   # sees every write, swallows none
    holder = get_backend(_url(own_redis, recheck="5"))
    waiter = get_backend(_url(f"redis://127.0.0.1:{proxy.port}/0", recheck="5"))
    _contend(holder, key, waiter)
    assert not any(w.count(b"EVALSHA") == 2 and b"BLPOP" in w for w in writes)
    _contend(holder, key, waiter)
    assert any(w.count(b"EVALSHA") == 2 and b"BLPOP" in w for w in writes)


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_key_seen_contended_and_now_free_is_granted_at_once(redis_url: str, key: str,
                                                              asynchronous: bool) -> None:
    """The folded acquire finds the lock free: the grant pushes the caller's own signal,
    so the BLPOP in the same write returns at once (not after ``recheck``, 5 s here), and
    no signal list is left behind."""
    import asyncio
    backend = get_backend(_url(redis_url, prefix="hand", recheck="5"))
    _contend(backend, key, backend)
    assert key in backend._contended
    keys, sig = backend.keys_for(key)
    t0 = time.monotonic()
    if asynchronous:
        async def take():
            async with global_lock(key, backend=backend, lease=5, wait_timeout=10) as lease:
                return lease
        lease = asyncio.run(take())
    else:
        with global_lock(key, backend=backend, lease=5, wait_timeout=10) as lease:
            pass
    assert time.monotonic() - t0 < 1.0
    assert lease.fence == backend.fence_of(key)
    assert backend.client.exists(sig + lease.token, keys[0]) == 0
    assert key not in backend._contended   # granted at once: the next acquire is the plain one


def test_a_folded_wait_never_outlasts_the_holders_lease(redis_url: str, key: str) -> None:
    """The folded BLPOP is sent before the holder's remaining lease is known; when that
    lease ends sooner than the BLPOP would time out (recheck 5 s here), the wait ends at
    the lease's end, not at the time-out: a holder that died costs its lease, no more."""
    backend = get_backend(_url(redis_url, prefix="hand", recheck="5"))
    _contend(backend, key, backend)
    assert key in backend._contended
    other = get_backend(_url(redis_url, prefix="hand", recheck="5", timeout="4"))   # its own backend
    dead = global_lock(key, backend=other, lease=0.3)
    holder = threading.Thread(target=dead.__enter__)   # never released: a holder that died
    holder.start()
    holder.join(5)
    t0 = time.monotonic()
    assert key in backend._contended
    with global_lock(key, backend=backend, lease=5, wait_timeout=10) as lease:
        took = time.monotonic() - t0
    assert 0.1 < took < 1.5
    assert lease.fence > dead.lease.fence
