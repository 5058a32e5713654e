"""Lock-service benchmark: txnsafety's locks side by side with their peers, in one run.

    python benchmarks/bench_locks.py                 # everything (~1.5 min on 2 cores)
    python benchmarks/bench_locks.py --quick         # shorter phases
    python benchmarks/bench_locks.py --only redis    # redis | memcached | postgresql | memory

Redis (one server on 127.0.0.1, one connection pool shared by every contender):
txnsafety ``global_lock`` vs redis-py ``Lock`` vs python-redis-lock (``redis_lock``).

1. uncontended acquire+release, p50/p99 per cycle (target: no slower than redis-py);
2. handoff latency: a holder releases while one client waits (target: p50 in ms);
3. fairness: 16 client processes loop on one lock; acquisitions/s, Jain's index, per-client
   min/max (``benchmarks/trace_lock_handoff.py`` splits these handoffs into their steps);
4. interactive wait p50/p99 while 4 batch processes keep the lock busy.

Other backends are compared with what people use there without us: PostgreSQL
with bare ``pg_advisory_lock``/``unlock`` on a held connection, memcached with the
seed's ``add``/``delete``, memory with ``threading.Lock``.  Each line prints the
ratio to the baseline (the first row of its table).

Environment: TXNSAFETY_BENCH_REDIS / _POSTGRES / _MEMCACHED override the URLs.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, ContextManager, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

REDIS = os.environ.get("TXNSAFETY_BENCH_REDIS", "redis://127.0.0.1:6379/14")
POSTGRES = os.environ.get("TXNSAFETY_BENCH_POSTGRES",
                          "postgresql://txnsafety:txnsafety@127.0.0.1:5432/txnsafety")
MEMCACHED = os.environ.get("TXNSAFETY_BENCH_MEMCACHED", "memcached://127.0.0.1:11211")

LockFactory = Callable[[str], ContextManager[object]]


# -- contenders ---------------------------------------------------------------------------

def redis_contenders() -> dict[str, Callable[[], LockFactory]]:
    """name -> builder (called in the process that uses it) of key -> context manager."""
    def client():  # noqa: ANN202
        import redis
        return redis.Redis(connection_pool=redis.ConnectionPool.from_url(REDIS))

    def redis_py() -> LockFactory:
        c = client()
        return lambda key: c.lock("rp:" + key, timeout=30, blocking_timeout=60)

    def python_redis_lock() -> LockFactory:
        import redis_lock
        c = client()

        @contextmanager
        def lock(key: str) -> Iterator[None]:
            lk = redis_lock.Lock(c, "prl:" + key, expire=30)
            lk.acquire(timeout=25)
            try:
                yield
            finally:
                lk.release()
        return lock

    def ours(priority: str | None = None) -> Callable[[], LockFactory]:
        def build() -> LockFactory:
            from txnsafety.locks import global_lock
            from txnsafety.locks.redis_backend import RedisBackend
            backend = RedisBackend(REDIS + "?prefix=bench", client=client())
            return lambda key: global_lock("ts:" + key, backend=backend, lease=30, wait_timeout=60,
                                           priority=priority or "interactive")
        return build

    return {"redis-py Lock": redis_py, "python-redis-lock": python_redis_lock, "txnsafety": ours()}


def other_contenders(which: str) -> dict[str, Callable[[], LockFactory]]:
    if which == "postgresql":
        def bare() -> LockFactory:
            import psycopg
            from txnsafety.locks.postgres_backend import key_hash
            conn = psycopg.connect(POSTGRES, autocommit=True)

            @contextmanager
            def lock(key: str) -> Iterator[None]:
                k = key_hash("bare:" + key)
                conn.execute("SELECT pg_advisory_lock(%s)", (k,))
                try:
                    yield
                finally:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (k,))
            return lock

        def ours() -> LockFactory:
            from txnsafety.locks import backend_from_url, global_lock
            backend = backend_from_url(POSTGRES)
            return lambda key: global_lock("ts:" + key, backend=backend, lease=30, wait_timeout=60,
                                           priority="interactive")
        return {"bare pg_advisory_lock": bare, "txnsafety": ours}
    if which == "memcached":
        def seed() -> LockFactory:
            from urllib.parse import urlsplit
            from pymemcache.client.base import Client
            parts = urlsplit(MEMCACHED)
            c = Client((parts.hostname, parts.port), no_delay=True)

            @contextmanager
            def lock(key: str) -> Iterator[None]:
                k = "seed:" + key
                delay = 0.002
                while not c.add(k, b"1", expire=30, noreply=False):
                    time.sleep(delay)
                    delay = min(delay * 2, 0.05)
                try:
                    yield
                finally:
                    c.delete(k)
            return lock

        def ours() -> LockFactory:
            from txnsafety.locks import backend_from_url, global_lock
            backend = backend_from_url(MEMCACHED + "?prefix=bench")
            return lambda key: global_lock("ts:" + key, backend=backend, lease=30, wait_timeout=60,
                                           priority="interactive")
        return {"seed add/delete (pymemcache)": seed, "txnsafety": ours}
    if which == "memory":
        def tlock() -> LockFactory:
            locks: dict[str, threading.Lock] = {}
            return lambda key: locks.setdefault(key, threading.Lock())

        def ours() -> LockFactory:
            from txnsafety.locks import global_lock
            return lambda key: global_lock(key, backend="memory://", lease=30, wait_timeout=60,
                                           priority="interactive")
        return {"threading.Lock": tlock, "txnsafety": ours}
    raise ValueError(which)


# -- measurements -------------------------------------------------------------------------

def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def uncontended_interleaved(builds: dict[str, Callable[[], LockFactory]], cycles: int,
                            chunk: int = 100) -> dict[str, list[float]]:
    """Cycle times per contender, run in interleaved chunks so load drift hits all alike."""
    locks = {name: build() for name, build in builds.items()}
    key = uuid.uuid4().hex
    for lock in locks.values():
        for _ in range(50):  # warm up connections and scripts
            with lock(key):
                pass
    times: dict[str, list[float]] = {name: [] for name in locks}
    for _ in range(max(cycles // chunk, 1)):
        for name, lock in locks.items():
            out = times[name]
            for _ in range(chunk):
                t0 = time.perf_counter()
                with lock(key):
                    pass
                out.append(time.perf_counter() - t0)
    return times


def handoff(build: Callable[[], LockFactory], rounds: int) -> list[float]:
    """Holder thread releases while the waiter thread blocks.

    Measured from the moment the holder starts releasing (the end of its ``with``
    body) to the moment the waiter holds the lock: the release call itself is
    part of the handoff.
    """
    lock_h, lock_w = build(), build()
    key = uuid.uuid4().hex
    gaps: list[float] = []
    for _ in range(rounds):
        held = threading.Event()
        released: list[float] = []

        def holder(held: threading.Event = held, released: list[float] = released) -> None:
            with lock_h(key):
                held.set()
                time.sleep(0.02)  # give the waiter time to block on the lock
                released.append(time.perf_counter())

        t = threading.Thread(target=holder)
        t.start()
        held.wait()
        with lock_w(key):
            got = time.perf_counter()
        t.join()
        gaps.append(got - released[0])
    return gaps


def _fair_worker(name: str, which: str, key: str, hold: float, start, stop, out) -> None:  # noqa: ANN001
    build = (redis_contenders() if which == "redis" else other_contenders(which))[name]
    lock = build()
    start.wait()
    n = 0
    while not stop.is_set():
        with lock(key):
            time.sleep(hold)
        n += 1
    out.put(n)


def fairness(name: str, which: str, clients: int, seconds: float, hold: float) -> list[int]:
    ctx = multiprocessing.get_context("fork")
    start, stop, out = ctx.Barrier(clients + 1), ctx.Event(), ctx.Queue()
    key = uuid.uuid4().hex
    procs = [ctx.Process(target=_fair_worker, args=(name, which, key, hold, start, stop, out))
             for _ in range(clients)]
    for p in procs:
        p.start()
    start.wait()
    time.sleep(seconds)
    stop.set()
    counts = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
    return counts


def _batch_worker(build_name: str, key: str, start, stop) -> None:  # noqa: ANN001
    lock = _priority_builders()[build_name]("batch")()
    start.wait()
    while not stop.is_set():
        with lock(key):
            time.sleep(0.005)


def _priority_builders() -> dict[str, Callable[[str], Callable[[], LockFactory]]]:
    rc = redis_contenders()

    def ours_with(priority_on: bool) -> Callable[[str], Callable[[], LockFactory]]:
        def by_role(role: str) -> Callable[[], LockFactory]:
            def build() -> LockFactory:
                from txnsafety.locks import global_lock
                from txnsafety.locks.redis_backend import RedisBackend
                import redis
                pool = redis.ConnectionPool.from_url(REDIS)
                backend = RedisBackend(REDIS + "?prefix=bench", client=redis.Redis(connection_pool=pool))
                prio = role if priority_on else "interactive"
                return lambda key: global_lock("ts:" + key, backend=backend, lease=30, wait_timeout=60,
                                               priority=prio)
            return build
        return by_role

    return {
        "redis-py Lock": lambda role: rc["redis-py Lock"],
        "python-redis-lock": lambda role: rc["python-redis-lock"],
        "txnsafety, priority off": ours_with(False),
        "txnsafety, priority on": ours_with(True),
    }


def interactive_under_batch(name: str, seconds: float, batch_clients: int = 4) -> list[float]:
    ctx = multiprocessing.get_context("fork")
    start, stop = ctx.Barrier(batch_clients + 1), ctx.Event()
    key = uuid.uuid4().hex
    procs = [ctx.Process(target=_batch_worker, args=(name, key, start, stop)) for _ in range(batch_clients)]
    for p in procs:
        p.start()
    lock = _priority_builders()[name]("interactive")()
    start.wait()
    waits: list[float] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.01)  # an interactive request every ~10 ms
        t0 = time.perf_counter()
        with lock(key):
            waits.append(time.perf_counter() - t0)
            time.sleep(0.001)
    stop.set()
    for p in procs:
        p.join(30)
    return waits


# -- reporting ----------------------------------------------------------------------------

def jain(counts: list[int]) -> float:
    """Jain's fairness index of per-client counts: 1.0 when all got the same share."""
    return sum(counts) ** 2 / (len(counts) * sum(c * c for c in counts)) if any(counts) else 0.0


def ms(x: float) -> str:
    return f"{x * 1000:8.3f}"


def table(title: str, header: str, rows: list[tuple[str, str, float]]) -> None:
    """rows: (name, formatted columns, metric for the ratio; lower is better)."""
    print(f"\n{title}\n  {'':30s}{header}   ratio vs {rows[0][0]}")
    base = rows[0][2]
    for name, cols, metric in rows:
        ratio = f"{metric / base:6.2f}x" if base > 0 else "   n/a"
        print(f"  {name:30s}{cols}   {ratio}")


def run_redis(args: argparse.Namespace) -> None:
    contenders = redis_contenders()
    rows = []
    for name, t in uncontended_interleaved(contenders, args.cycles).items():
        rows.append((name, f"p50 {ms(pct(t, 50))} ms  p99 {ms(pct(t, 99))} ms  {len(t) / sum(t):8.0f}/s",
                     pct(t, 50)))
    table(f"Redis: uncontended acquire+release ({args.cycles} cycles, interleaved)", "", rows)

    rows = []
    for name, build in contenders.items():
        g = handoff(build, args.handoffs)
        rows.append((name, f"p50 {ms(pct(g, 50))} ms  p99 {ms(pct(g, 99))} ms", pct(g, 50)))
    table(f"Redis: handoff latency, release -> waiter holds it ({args.handoffs} rounds)", "", rows)

    rows = []
    for name in contenders:
        c = fairness(name, "redis", args.clients, args.seconds, 0.002)
        rows.append((name, f"{sum(c) / args.seconds:6.0f}/s  Jain {jain(c):.3f}  per-client min {min(c):4d} "
                           f"max {max(c):4d}", max(c) / max(min(c), 1)))
    table(f"Redis: fairness, {args.clients} processes x {args.seconds:g}s, 2 ms holds "
          "(ratio = max/min spread)", "", rows)

    rows = []
    for name in _priority_builders():
        w = interactive_under_batch(name, args.seconds)
        rows.append((name, f"n {len(w):4d}  wait p50 {ms(pct(w, 50))} ms  p99 {ms(pct(w, 99))} ms",
                     pct(w, 99)))
    table(f"Redis: interactive wait while 4 batch processes hold the lock 5 ms at a time "
          f"({args.seconds:g}s; ratio on p99)", "", rows)


def run_other(which: str, args: argparse.Namespace) -> None:
    contenders = other_contenders(which)
    rows = []
    cycles = args.cycles // (4 if which == "postgresql" else 1)
    for name, t in uncontended_interleaved(contenders, cycles).items():
        rows.append((name, f"p50 {ms(pct(t, 50))} ms  p99 {ms(pct(t, 99))} ms  {len(t) / sum(t):8.0f}/s",
                     pct(t, 50)))
    table(f"{which}: uncontended acquire+release", "", rows)
    if which == "memory":
        return
    rows = []
    for name, build in contenders.items():
        g = handoff(build, args.handoffs // 2)
        rows.append((name, f"p50 {ms(pct(g, 50))} ms  p99 {ms(pct(g, 99))} ms", pct(g, 50)))
    table(f"{which}: handoff latency", "", rows)
    rows = []
    for name in contenders:
        c = fairness(name, which, args.clients // 2, args.seconds / 2, 0.002)
        rows.append((name, f"{sum(c) / (args.seconds / 2):6.0f}/s  Jain {jain(c):.3f}  "
                           f"per-client min {min(c):4d} max {max(c):4d}", max(c) / max(min(c), 1)))
    table(f"{which}: fairness, {args.clients // 2} processes (ratio = max/min spread)", "", rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=["redis", "postgresql", "memcached", "memory"], action="append")
    parser.add_argument("--quick", action="store_true", help="shorter phases")
    args = parser.parse_args()
    args.cycles = 1000 if args.quick else 3000
    args.handoffs = 20 if args.quick else 60
    args.clients = 16
    args.seconds = 2.0 if args.quick else 4.0
    which = args.only or ["redis", "postgresql", "memcached", "memory"]
    t0 = time.monotonic()
    print(f"txnsafety lock benchmark  (python {sys.version.split()[0]}, {os.cpu_count()} cpus)")
    if "redis" in which:
        run_redis(args)
    for other in ("postgresql", "memcached", "memory"):
        if other in which:
            run_other(other, args)
    print(f"\ndone in {time.monotonic() - t0:.1f}s")


if __name__ == "__main__":
    main()
