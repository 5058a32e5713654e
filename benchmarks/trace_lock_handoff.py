"""Where a contended Redis lock handoff's time goes (measurement, not a comparison).

N client processes loop on one key of txnsafety's Redis ``global_lock``: acquire,
hold (``time.sleep``), release.  Every process stamps each step of every cycle on the
machine-wide monotonic clock: the API call, the backend's first ACQUIRE script, the
waiter's BLPOP and claiming ACQUIRE (one write), the hold, the RELEASE script.  The
parent orders the cycles by fence (one per grant) and splits each handoff, from the
holder's end of hold to the next holder's code running, into its steps: the median
and p90 of each.  Runs without stamps give the throughput and Jain's fairness index;
python-redis-lock and redis-py run the same loop for reference, and ``--baseline``
runs txnsafety from another checkout beside this one (``--rounds``: each contender
that many times, in rotating order).

    python benchmarks/trace_lock_handoff.py [--clients 16] [--seconds 10] [--hold 0.001]
        [--rounds 3] [--baseline PATH-of-another-checkout] [--no-peers] [--no-trace]

Needs Redis (TXNSAFETY_BENCH_REDIS, default redis://127.0.0.1:6379/14; keys are unique
per run and deleted after).
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

REDIS = os.environ.get("TXNSAFETY_BENCH_REDIS", "redis://127.0.0.1:6379/14")
now = time.monotonic


def _client():
    import redis
    return redis.Redis.from_url(REDIS)


def _ours(trace: list | None):
    """Factory of global_lock context managers; with ``trace``, its backend stamps each step.

    Steps: ``script`` (the first ACQUIRE, the RELEASE), ``wait`` (from sending the
    waiter's BLPOP to holding the claim's reply: one pipelined write now, a BLPOP then
    an ACQUIRE in code before the pipelined claim, whose two calls are stamped as one).
    """
    from txnsafety.locks import global_lock
    from txnsafety.locks.redis_backend import RedisBackend
    backend = RedisBackend(REDIS + "?prefix=tracehandoff", client=_client())
    steps: list = []
    if trace is not None:
        def stamped(name, func, begin=True, end=True):
            def call(*args, **kwargs):
                if begin:
                    steps.append((name + ">", now()))
                try:
                    return func(*args, **kwargs)
                finally:
                    if end:
                        steps.append((name + "<", now()))
            return call
        backend._run = stamped("script", backend._run)                  # first ACQUIRE, RELEASE
        if hasattr(backend, "_wait_claim"):
            backend._wait_claim = stamped("wait", backend._wait_claim)
            if hasattr(backend, "_fold"):  # queue, wait and claim in one write
                backend._fold = stamped("wait", backend._fold)
        else:  # code before the pipelined claim: BLPOP, then ACQUIRE
            backend.client.blpop = stamped("wait", backend.client.blpop, end=False)
            script = backend._s_acquire
            backend._s_acquire = stamped("wait", script, begin=False)
            backend._s_acquire.sha = script.sha  # the first ACQUIRE goes through _run(script.sha)
    return backend, steps, lambda key: global_lock(key, backend=backend, lease=30, wait_timeout=60)


def _peer(name: str):
    client = _client()
    if name == "redis-py":
        return lambda key: client.lock("rp:" + key, timeout=30, blocking_timeout=60)
    import redis_lock
    from contextlib import contextmanager

    @contextmanager
    def lock(key):
        held = redis_lock.Lock(client, "prl:" + key, expire=30)
        held.acquire(timeout=25)
        try:
            yield
        finally:
            held.release()
    return lock


def _worker(name: str, key: str, hold: float, trace: bool, start, stop, out) -> None:  # noqa: ANN001
    cycles: list = []
    if name.startswith("txnsafety"):
        if name != "txnsafety":  # "txnsafety@PATH": the code of another checkout
            sys.path.insert(0, name.partition("@")[2])
        _, steps, factory = _ours([] if trace else None)
    else:
        steps, factory = [], _peer(name)
    start.wait()
    count = 0
    while not stop.is_set():
        steps.clear()
        t_enter = now()
        with factory(key) as lease:
            t_in = now()
            time.sleep(hold)
            t_held = now()
        t_out = now()
        count += 1
        if trace:
            cycles.append((lease.fence, os.getpid(), t_enter, t_in, t_held, t_out, list(steps)))
    out.put((count, cycles))


def run(name: str, clients: int, seconds: float, hold: float, trace: bool) -> tuple[list[int], list]:
    ctx = multiprocessing.get_context("fork")
    start, stop, out = ctx.Barrier(clients + 1), ctx.Event(), ctx.Queue()
    key = "trace:" + uuid.uuid4().hex
    procs = [ctx.Process(target=_worker, args=(name, key, hold, trace, start, stop, out)) for _ in range(clients)]
    for p in procs:
        p.start()
    start.wait()
    time.sleep(seconds)
    stop.set()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
    _client().delete(*[k for k in _client().scan_iter(f"*{key}*")] or ["-"])
    return [r[0] for r in results], [c for r in results for c in r[1]]


def jain(counts: list[int]) -> float:
    return sum(counts) ** 2 / (len(counts) * sum(c * c for c in counts)) if any(counts) else 0.0


def _last(steps: list, name: str) -> float | None:
    return next((t for n, t in reversed(steps) if n == name), None)


def split(cycles: list) -> dict[str, list[float]]:
    """Per handoff (holder k ends its hold -> holder k+1's code runs), the time of each step.

    Cycles are ordered by fence (one per grant, increasing; not consecutive numbers,
    since a fence is at least the server's clock in microseconds).  A pair is a
    handoff when the next holder is another process whose wait ended after the
    release was sent.
    """
    cycles.sort(key=lambda c: c[0])
    parts: dict[str, list[float]] = {k: [] for k in (
        "hold (the sleep as it came out)", "API before RELEASE", "RELEASE round trip",
        "release sent -> waiter holds the claim's reply", "API after the grant",
        "handoff total (end of hold -> next holder runs)")}
    for prev, nxt in zip(cycles, cycles[1:]):
        if nxt[1] == prev[1]:
            continue  # the same process again: no handoff
        _, _, _, p_in, p_held, p_out, p_steps = prev
        _, _, n_enter, n_in, _, _, n_steps = nxt
        rel_start, rel_end = _last(p_steps, "script>"), _last(p_steps, "script<")
        woke = _last(n_steps, "wait<")
        if None in (rel_start, rel_end, woke) or woke < rel_start:
            continue
        parts["hold (the sleep as it came out)"].append(p_held - p_in)
        parts["API before RELEASE"].append(rel_start - p_held)
        parts["RELEASE round trip"].append(rel_end - rel_start)
        parts["release sent -> waiter holds the claim's reply"].append(woke - rel_start)
        parts["API after the grant"].append(n_in - woke)
        parts["handoff total (end of hold -> next holder runs)"].append(n_in - p_held)
    return parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--hold", type=float, default=0.001)
    parser.add_argument("--rounds", type=int, default=1,
                        help="runs of each contender, in rotating order (drift hits all alike)")
    parser.add_argument("--baseline", metavar="PATH",
                        help="also run txnsafety from another checkout (e.g. a git worktree of main)")
    parser.add_argument("--no-peers", action="store_true", help="txnsafety only")
    parser.add_argument("--no-trace", action="store_true", help="skip the traced run")
    args = parser.parse_args()
    print(f"{args.clients} processes, one key, hold {args.hold * 1e3:g} ms, {args.seconds:g} s each, "
          f"{args.rounds} round(s)\n")
    names = (["txnsafety"] + ([f"txnsafety@{args.baseline}"] if args.baseline else [])
             + ([] if args.no_peers else ["python-redis-lock", "redis-py"]))
    results: dict[str, list[tuple[float, float, list[int]]]] = {name: [] for name in names}
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            counts, _ = run(name, args.clients, args.seconds, args.hold, trace=False)
            results[name].append((sum(counts) / args.seconds, jain(counts), counts))
            print(f"  round {r + 1}  {name:<18} {sum(counts) / args.seconds:6.0f}/s  Jain {jain(counts):.3f}  "
                  f"per-client min {min(counts)} max {max(counts)}", flush=True)
    if args.rounds > 1:
        print("\nmedian of the rounds (range):")
        for name, rows in results.items():
            rates, jains = [x[0] for x in rows], [x[1] for x in rows]
            print(f"  {name:<18} {statistics.median(rates):6.0f}/s ({min(rates):.0f} to {max(rates):.0f})  "
                  f"Jain {statistics.median(jains):.3f} ({min(jains):.3f} to {max(jains):.3f})")
    if args.no_trace:
        return
    for name in names[:2] if args.baseline else names[:1]:
        counts, cycles = run(name, args.clients, args.seconds, args.hold, trace=True)
        print(f"\n{name}, traced run: {sum(counts) / args.seconds:.0f}/s, "
              f"{len(cycles)} cycles; per handoff to another process, ms:")
        parts = split(cycles)
        for part, values in parts.items():
            if values:
                values.sort()
                print(f"  {part:<50} median {statistics.median(values) * 1e3:6.3f}   "
                      f"mean {statistics.fmean(values) * 1e3:6.3f}   "
                      f"p90 {values[int(len(values) * 0.9)] * 1e3:6.3f}")
        print(f"  ({len(parts['handoff total (end of hold -> next holder runs)'])} handoffs)")


if __name__ == "__main__":
    main()
