"""Benchmark: what the TXN flake8 plugin adds to a flake8 run, next to flake8-bugbear.

Runs, side by side in one invocation, on a large real codebase (Django's own source
in site-packages by default):

* flake8 alone (pyflakes, pycodestyle, mccabe),
* flake8 + flake8-bugbear,
* flake8 + txnsafety (TXN),

each in a fresh subprocess with only those plugins loaded (the others are filtered
out of flake8's plugin finder), ``--jobs 1`` so the figures compare one process.
Target (DESIGN.md, issue 5): the TXN plugin adds no more time than bugbear does.

    python benchmarks/bench_linter.py [PATH] [--repeat N] [--jobs N]

Not a timed test: it prints figures and ratios.  Times are the CPU seconds of each flake8
process (``--wall`` for wall-clock), best of ``--repeat`` interleaved runs.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

BASE = ("flake8", "pyflakes", "pycodestyle", "mccabe")
CPU = True   # compare CPU seconds of the flake8 process (steadier than wall time on a busy box)

RUNNER = r"""
import sys
import flake8.plugins.finder as finder
keep = set(sys.argv[1].split(",")) if sys.argv[1] else set()
orig = finder._find_importlib_plugins
finder._find_importlib_plugins = lambda: (p for p in orig() if p.package in keep)
from flake8.main.cli import main
sys.argv = ["flake8"] + sys.argv[2:]
main()
"""


def django_path() -> str:
    import django
    return os.path.dirname(django.__file__)


def run(packages: tuple[str, ...], path: str, jobs: int, extra: list[str]) -> tuple[float, int]:
    cmd = [sys.executable, "-c", RUNNER, ",".join(packages), "--jobs", str(jobs),
           "--exit-zero", "--isolated", *extra, path]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"flake8 failed ({proc.returncode}): {proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return (cpu if CPU else elapsed), len(proc.stdout.splitlines())


def count_txn(path: str, jobs: int) -> int:
    _t, n = run(BASE + ("txnsafety",), path, jobs, ["--select", "TXN"])
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", nargs="?", default=None, help="code to lint (default: Django's source)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--wall", action="store_true", help="compare wall-clock instead of CPU time")
    args = ap.parse_args(argv)
    global CPU
    CPU = not args.wall
    path = args.path or django_path()
    nfiles = sum(1 for _r, _d, fs in os.walk(path) for f in fs if f.endswith(".py"))
    print(f"code: {path} ({nfiles} .py files), jobs={args.jobs}, best of {args.repeat}, "
          f"{'CPU' if CPU else 'wall-clock'} seconds of the flake8 process")
    setups = {
        "flake8": BASE,
        "flake8 + bugbear": BASE + ("flake8-bugbear",),
        "flake8 + txnsafety": BASE + ("txnsafety",),
    }
    times: dict[str, list[float]] = {k: [] for k in setups}
    for _ in range(args.repeat):            # interleaved, so drift hits every setup alike
        for name, pkgs in setups.items():
            t, _n = run(pkgs, path, args.jobs, [])
            times[name].append(t)
    best = {k: min(v) for k, v in times.items()}
    for name in setups:
        print(f"  {name:<22} best {best[name]:7.2f} s   median {statistics.median(times[name]):7.2f} s")
    base = best["flake8"]
    bugbear = best["flake8 + bugbear"] - base
    txn = best["flake8 + txnsafety"] - base
    print(f"  added by bugbear:   {bugbear:6.2f} s  ({bugbear / base:6.1%} of flake8)")
    print(f"  added by txnsafety: {txn:6.2f} s  ({txn / base:6.1%} of flake8)")
    ratio = txn / bugbear if bugbear > 0 else float("inf")
    print(f"  txnsafety / bugbear added cost: {ratio:.2f}  "
          f"({'meets' if txn <= bugbear else 'misses'} the target: no more than bugbear)")
    print(f"  TXN findings on this code: {count_txn(path, args.jobs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
