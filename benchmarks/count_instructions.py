"""Instructions per request, checker on against off, counted by cachegrind: the timed benchmarks' deterministic twin.

On this shared 2-core machine a timed figure moves by two to three points from one run
to the next, more than the +2 % the checker is allowed on a request: a change of one
point cannot be seen in CPU time without many runs.  Instructions can: ``valgrind
--tool=cachegrind`` counts the instructions a process executes, and with the address
space laid out the same each time (``setarch -R``) and the same hash seed, the same
binary and inputs give the same count, whatever else the machine is doing (two runs of
each contender agreed to within ten instructions of three billion).  The layout still
moves the work itself: Django's requests by a few tenths of a point at most, SQLAlchemy's
request by up to three points (:func:`per_request`), so a change to the SQLAlchemy side
needs several layouts, and several runs, to show.

Each case serves one contender of a benchmark (their ``--loop NAME --calls N`` mode,
untimed) twice, at a low and a high number of calls; the difference divided by the calls
between is the per-request count, start-up and warm-up cancelling out.  Each layout (hash
seed and stack, ``--layouts``, see :func:`per_request`) gives the checker's share,
``checked / bare - 1``; the figure is the median of the layouts' shares, printed with
each layout's.

What instructions do not show: cache and branch-predictor misses, the kernel's work,
waits.  The checker's instructions cost more time than the request's average ones: they
are spread over many small functions, each a few more instruction-cache misses and
mispredicted indirect branches (cachegrind's simulation of the SQLAlchemy request, one
layout: +4 % of each), where +0.8 % of instructions of one tight Python loop added to the
bare request cost +0.2 to +0.5 % of its time (docs/performance.md, sixth round).
The timed benchmarks (``bench_sqlalchemy.py``, ``bench_django.py``, ``bench_rows.py``)
remain the figures the targets are stated in; this one says where a
change moved the work, exactly, and is how each change of docs/performance.md's fifth
round was checked before it was timed.

    python benchmarks/count_instructions.py                       # every case, SQLite (about 25 min)
    python benchmarks/count_instructions.py --only django-list --only sqlalchemy-list
    python benchmarks/count_instructions.py --postgres postgresql://USER:PASSWORD@HOST:5432/DB
    python benchmarks/count_instructions.py --state left-out --only shape-get   # a request the sample leaves out
    python benchmarks/count_instructions.py --only sqlalchemy-list --state off --state tenth --state checked \
        --layouts 3             # the 200-row list in three states (a tenth: the sampled contender's default rate)
    python benchmarks/count_instructions.py --only shape-flask-get --state off --state left-out --state checked \
        --calls 10 60          # three states against one count of the bare request, half the requests
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))


@dataclass(frozen=True)
class Case:
    """One benchmark's request: its script, the bare and the checked contender, and the calls to count."""

    name: str
    script: str
    bare: str
    checked: str
    low: int = 20
    high: int = 120
    #: Counted without ``--only`` (the footprint case is a calibration, asked for by name).
    default: bool = True
    #: Its script takes ``--postgres``.
    postgres: bool = True


CASES = (
    Case("sqlalchemy-request", "bench_sqlalchemy.py", "sqlalchemy", "checked"),
    Case("django-request", "bench_django.py", "django", "checked"),
    Case("sqlalchemy-list", "bench_rows.py", "sqlalchemy", "sqlalchemy checked", low=10, high=60),
    Case("django-list", "bench_rows.py", "django", "django checked", low=10, high=60),
    Case("footprint", "bench_footprint.py", "sqlalchemy", "padded", default=False, postgres=False),
    # issue 33's request shapes (bench_shapes.py): the same view as users write it
    Case("shape-get", "bench_shapes.py", "get:bare", "get:checked"),
    Case("shape-flask-get", "bench_shapes.py", "flask-get:bare", "flask-get:checked"),
    Case("shape-scalars", "bench_shapes.py", "scalars:bare", "scalars:checked"),
    Case("shape-filter-by-first", "bench_shapes.py", "filter-by-first:bare", "filter-by-first:checked"),
    Case("shape-async-get", "bench_shapes.py", "async-get:bare", "async-get:checked"),
    # and as Django users write it (bench_shapes_django.py)
    Case("shape-django-get", "bench_shapes_django.py", "django-get:bare", "django-get:checked"),
    Case("shape-django-filter-first", "bench_shapes_django.py", "django-filter-first:bare",
         "django-filter-first:checked"),
    Case("shape-django-list", "bench_shapes_django.py", "django-list:bare", "django-list:checked",
         low=10, high=60),
    Case("shape-django-async", "bench_shapes_django.py", "django-async:bare", "django-async:checked"),
)
TITLES = {
    "sqlalchemy-request": "SQLAlchemy WSGI request, 20 reads + 5 writes",
    "django-request": "Django WSGI request, 20 reads + 5 writes (no other middleware)",
    "sqlalchemy-list": "SQLAlchemy list endpoint, 200 rows",
    "django-list": "Django list endpoint, 200 rows",
    "footprint": "SQLAlchemy WSGI request, plus bench_footprint.py's tight loop",
    "shape-get": "session.get() request (SQLAlchemy 2.x, WSGI)",
    "shape-flask-get": "session.get() request (Flask-SQLAlchemy)",
    "shape-scalars": "select() + scalars().one() request (WSGI)",
    "shape-filter-by-first": "Query.filter_by().first() request (WSGI)",
    "shape-async-get": "AsyncSession.get() request (ASGI)",
    "shape-django-get": "Django get() request (WSGI)",
    "shape-django-filter-first": "Django filter().first() loop request (WSGI)",
    "shape-django-list": "Django list of 200 rows (WSGI)",
    "shape-django-async": "Django async view (ASGI, sync_to_async)",
}


def _tools() -> list[str]:
    """The command prefix; a missing tool is an error that names it."""
    for tool, package in (("valgrind", "valgrind"), ("setarch", "util-linux")):
        if shutil.which(tool) is None:
            raise SystemExit(f"count_instructions: {tool} is not installed (Debian: apt-get install {package})")
    return ["setarch", "-R", "valgrind", "--tool=cachegrind", "--cache-sim=no"]


def count(script: str, contender: str, calls: int, postgres: str | None, pad: int, seed: int,
          extra: tuple[str, ...] = ()) -> int:
    """Instructions of one run of ``script --loop contender --calls calls [extra]``, its stack moved by
    ``pad`` bytes, strings hashed with ``seed``."""
    with tempfile.TemporaryDirectory() as tmp:
        command = [*_tools(), f"--cachegrind-out-file={os.path.join(tmp, 'cg.out')}",
                   sys.executable, os.path.join(HERE, script), "--loop", contender, "--calls", str(calls), *extra]
        if postgres:
            command += ["--postgres", postgres]
        env = {**os.environ, "PYTHONHASHSEED": str(seed), "TXNSAFETY_LAYOUT_PAD": "x" * pad}
        done = subprocess.run(command, capture_output=True, text=True, env=env)
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"count_instructions: {script} --loop {contender!r} failed (exit {done.returncode}):\n"
                         f"{done.stdout}{done.stderr[-3000:]}")
    return int(found.group(1).replace(",", ""))


def per_request(case: Case, contender: str, postgres: str | None, layouts: int,
                pool: ThreadPoolExecutor, extra: tuple[str, ...] = ()) -> list[float]:
    """The per-request count under each of ``layouts`` layouts: layout ``i`` hashes strings
    with seed ``i`` and moves the stack by ``64 i`` bytes.

    With the address space and the hash seed fixed, a run's count is exact (two runs side
    by side: the same to the instruction), but the work itself follows from where objects
    land, which follows from the size of the environment and the command line, and from
    the hash seed.  SQLAlchemy keeps objects in sets and dicts keyed by ``id()`` and
    CPython caches attribute look-ups in a table indexed by name hashes, so the bare and
    the checked SQLAlchemy request each do more or less of that work from one layout to
    the next: the checker's share of that request ranged from +0.1 to +3.3 % over ten
    layouts (median +0.9 %), and a fixed amount of added work (bench_footprint.py's loop,
    +0.8 %) read +2.4 % in one layout.  Django's requests move by a few tenths of a
    point.  Hence the median of several layouts, both contenders of a layout run with the
    same seed and their command lines padded to the same weight."""
    even = max(len(case.bare), len(case.checked)) - len(contender)
    runs = [(pool.submit(count, case.script, contender, case.low, postgres, 64 * i + even, i, extra),
             pool.submit(count, case.script, contender, case.high, postgres, 64 * i + even, i, extra))
            for i in range(layouts)]
    return [(high.result() - low.result()) / (case.high - case.low) for low, high in runs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=[case.name for case in CASES],
                        help="count this case (repeatable; default: all)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="valgrind runs at once")
    parser.add_argument("--layouts", type=int, default=5,
                        help="layouts (hash seed and stack) per contender; the median of their shares (default 5)")
    parser.add_argument("--postgres", metavar="URL", help="on PostgreSQL (a private database per run)")
    parser.add_argument("--state", choices=["checked", "left-out", "tenth", "off"], action="append",
                        help="shape and list cases: what is counted against the bare request: a checked request, "
                             "one the sample leaves out (the sampled contender at sample_rate 0), the sampled "
                             "contender at the benchmark's default rate (a tenth) or the checker installed but off "
                             "(repeatable: the bare request is counted once for all; default checked)")
    parser.add_argument("--calls", nargs=2, type=int, metavar=("LOW", "HIGH"),
                        help="the two numbers of requests served (default: the case's, 20 and 120 for a request)")
    args = parser.parse_args()
    states = args.state or ["checked"]
    cases = [case for case in CASES if (case.name in args.only if args.only else case.default)]
    if args.calls:
        cases = [dataclasses.replace(case, low=args.calls[0], high=args.calls[1]) for case in cases]
    if args.postgres and any(not case.postgres for case in cases):
        parser.error("--postgres: " + ", ".join(case.name for case in cases if not case.postgres)
                     + " runs on SQLite only")
    if states != ["checked"] and any(contender_of(case, "off") is None for case in cases):
        parser.error(f"--state {' '.join(states)}: only the shape-* and *-list cases have the sampled and off "
                     f"contenders")
    if "left-out" in states and "tenth" in states:
        parser.error("--state left-out and tenth: two sample rates, count them in two runs")
    _tools()
    where = "PostgreSQL" if args.postgres else "SQLite"
    print(f"instructions per request against bare (cachegrind, setarch -R; {args.layouts} layouts, "
          f"layout i: hash seed i and "
          f"the stack moved by 64 i bytes, names padded alike), {where}")
    print(f"  {'request':<66}{'bare':>12}{'checked':>12}{'added':>10}{'share':>9}   share per layout")
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for case in cases:
            # left out: the sampled contender at rate 0, both command lines of the same weight (the bare
            # request ignores the rate; "sampled" is as long as "checked")
            extra = ("--sample-rate", "0") if "left-out" in states else ()
            bare = per_request(case, case.bare, args.postgres, args.layouts, pool, extra)
            for state in states:
                contender = contender_of(case, state)
                checked = per_request(case, contender, args.postgres, args.layouts, pool, extra)
                title = TITLES[case.name] if states == ["checked"] else f"{TITLES[case.name]}, {state}"
                print(table_row(title, bare, checked), flush=True)


def contender_of(case: Case, state: str) -> str | None:
    """The contender counted for ``state``: the shape benchmarks name theirs ``SHAPE:STATE``,
    ``bench_rows.py`` its ``NAME checked`` / ``NAME off`` / ``NAME sampled``; None when the case
    has no such contender."""
    if state == "checked":
        return case.checked
    suffix = "off" if state == "off" else "sampled"
    for mark in (":", " "):
        if case.checked.endswith(mark + "checked"):
            return case.checked[:-len("checked")] + suffix
    return None


def table_row(title: str, bare: list[float], checked: list[float]) -> str:
    """One case's row: the medians of the layouts' counts, the median of their differences
    and of their shares (so ``added`` and ``share`` need not be each other's ratio), each
    layout's share."""
    shares = [c / b - 1 for b, c in zip(bare, checked)]
    added = statistics.median(c - b for b, c in zip(bare, checked))
    return (f"  {title:<66}{statistics.median(bare) / 1e6:>10.3f} M{statistics.median(checked) / 1e6:>10.3f} M"
            f"{added / 1e3:>8.0f} k{100 * statistics.median(shares):>+8.2f} %   "
            + " ".join(f"{100 * share:+.2f}" for share in shares))


if __name__ == "__main__":
    main()
