"""Would a compiled core pay?  The checker's hot modules built with Cython, against the pure-Python ones.

Issue 19 asked for an optional compiled core (mypyc or Cython) to be measured before it
is chosen.  This builds one in a scratch copy of the tree: Cython compiles the modules
the checked requests spend their time in (:data:`HOT_MODULES`: per statement and per
write; ``sqlalchemy/detached.py``, ``sqlalchemy/isolation.py`` and ``config.py``, called
once per Session or transaction, are left out) as they are, with
``annotation_typing=False`` (otherwise Cython enforces the type hints at run time, and
``cls: type`` rejects Django's ``ModelBase``: every ``save()`` was an internal error).
Then the same benchmark runs in the copy and in this tree, one after the other, and the
checker's share of each request is printed side by side.

    python benchmarks/compiled_checker.py                   # instructions (count_instructions.py), about 50 min
    python benchmarks/compiled_checker.py --only django-request --layouts 3
    python benchmarks/compiled_checker.py --timed           # CPU time: bench_sqlalchemy.py, bench_django.py

Needs a C compiler and Python's headers; Cython is installed into the scratch directory
(``pip install --target``), never into this environment.  Each figure is the checker's
share against the bare request of its own tree, measured side by side in one run; the two
trees' runs follow each other, so timed figures carry the machine's run-to-run drift.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Where a checked Django or SQLAlchemy request spends its time: the per-statement and per-write paths.
HOT_MODULES = (
    "txnsafety/context.py", "txnsafety/checker.py", "txnsafety/stamps.py", "txnsafety/judgement.py",
    "txnsafety/check_then_act.py", "txnsafety/scopes.py", "txnsafety/provenance.py", "txnsafety/policies.py",
    "txnsafety/wsgi.py", "txnsafety/django/transactions.py", "txnsafety/django/reads.py",
    "txnsafety/django/hooks.py", "txnsafety/django/saves.py", "txnsafety/django/middleware.py",
    "txnsafety/sqlalchemy/reads.py", "txnsafety/sqlalchemy/events.py", "txnsafety/sqlalchemy/changes.py",
    "txnsafety/sqlalchemy/lookups.py", "txnsafety/sqlalchemy/updates.py",
)
#: "overhead of checked: +6.5 %" (the timed benchmarks) and count_instructions.py's table rows.
_TIMED = re.compile(r"^overhead of checked: ([+-][\d.]+) %", re.M)
_COUNTED = re.compile(r"^  (\S.*?)\s{2,}[\d.]+ M\s+[\d.]+ M\s+-?\d+ k\s+([+-][\d.]+) %", re.M)


def _run(command: list[str], cwd: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"compiled_checker: {' '.join(command)} failed (exit {done.returncode}):\n"
                         f"{done.stdout[-2000:]}{done.stderr[-3000:]}")
    return done.stdout


def build(scratch: str) -> str:
    """A copy of the tree in ``scratch`` with :data:`HOT_MODULES` compiled; its path."""
    tree = os.path.join(scratch, "tree")
    for part in ("txnsafety", "benchmarks", "fixtures"):
        shutil.copytree(os.path.join(ROOT, part), os.path.join(tree, part),
                        ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.c"))
    tools = os.path.join(scratch, "cython")
    _run([sys.executable, "-m", "pip", "install", "--quiet", "--target", tools, "cython>=3"], cwd=scratch)
    env = {**os.environ, "PYTHONPATH": tools}
    _run([sys.executable, "-m", "Cython.Build.Cythonize", "-i", "-3", "-j", str(os.cpu_count() or 1),
          "-X", "annotation_typing=False", *HOT_MODULES], cwd=tree, env=env)
    names = [path[:-3].replace("/", ".") for path in HOT_MODULES]
    check = ("import importlib, sys; sys.path.insert(0, '.'); "
             f"bad = [n for n in {names!r} if not importlib.import_module(n).__file__.endswith('.so')]; "
             "sys.exit(f'not compiled: {bad}' if bad else 0)")
    _run([sys.executable, "-c", check], cwd=tree)
    return tree


def counted_shares(out: str) -> dict[str, float]:
    """count_instructions.py's table: request title -> the checker's share, in percent."""
    return {title.strip(): float(share) for title, share in _COUNTED.findall(out)}


def timed_shares(script: str, out: str) -> dict[str, float]:
    """A timed benchmark's output: "script: comparison title" -> the checker's overhead, in percent."""
    found = {}
    for block in out.split("\n\n"):  # a comparison's block: its title first, its overhead last
        share = _TIMED.search(block)
        if share:
            found[f"{script}: {block.strip().splitlines()[0]}"] = float(share.group(1))
    return found


def shares(tree: str, args: argparse.Namespace) -> dict[str, float]:
    """The checker's share of each request, as the tree's own benchmarks measure it."""
    if args.timed:
        found: dict[str, float] = {}
        for script in ("bench_sqlalchemy.py", "bench_django.py"):
            found.update(timed_shares(script, _run([sys.executable, f"benchmarks/{script}", "--rounds",
                                                    str(args.rounds), "--processes", str(args.processes)], cwd=tree)))
        return found
    command = [sys.executable, "benchmarks/count_instructions.py", "--layouts", str(args.layouts)]
    for case in args.only or ():
        command += ["--only", case]
    return counted_shares(_run(command, cwd=tree))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timed", action="store_true", help="CPU time instead of instructions")
    parser.add_argument("--only", action="append", help="count_instructions.py's --only (repeatable)")
    parser.add_argument("--layouts", type=int, default=5, help="count_instructions.py's --layouts")
    parser.add_argument("--rounds", type=int, default=60, help="timed: rounds per benchmark")
    parser.add_argument("--processes", type=int, default=4, help="timed: processes per benchmark")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="txnsafety-compiled-") as scratch:
        compiled = shares(build(scratch), args)
    pure = shares(ROOT, args)
    kind = "CPU time" if args.timed else "instructions"
    print(f"the checker's share of each request ({kind}): pure Python against its hot modules compiled by Cython")
    print(f"  {'request':<84}{'pure':>9}{'compiled':>10}{'ratio':>8}")
    for name, share in pure.items():
        other = compiled.get(name)
        ratio = f"{other / share:>8.2f}" if other is not None and share > 0 else f"{'-':>8}"
        shown = f"{other:>+9.2f}" if other is not None else f"{'-':>9}"
        print(f"  {name[:84]:<84}{share:>+8.2f}%{shown}%{ratio}")


if __name__ == "__main__":
    main()
