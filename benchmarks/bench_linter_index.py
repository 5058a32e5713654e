"""Benchmark: what the project index (``.txnsafety_cache``) costs and saves, cold and warm.

Every entry point judges a file with the whole project's analysis (issue 14, item 4): flake8
on one file and the pre-commit hook on a few must not pay for that analysis on every run.
This copies a real project (a corpus release from ``~/.cache/txnsafety-corpus/unpacked/``,
Weblate by default, or any folder) to a temporary git work tree and times fresh processes:

* ``no index``: ``txnsafety lint . --no-cache`` (the analysis alone, nothing written),
* ``cold``: ``txnsafety lint .`` with no index (analysis plus writing the index),
* ``warm``: ``txnsafety lint .`` again, nothing changed,
* ``warm, one file``: ``txnsafety lint FILE`` (what pre-commit runs for one changed file),
* ``one file edited``: ``txnsafety lint FILE`` after FILE changed (read again, project
  analysed again),
* ``flake8 cold`` / ``flake8 warm``: ``flake8 --select TXN FILE``.

    python benchmarks/bench_linter_index.py [PROJECT] [--repeat N]

Each figure is the median of ``--repeat`` fresh processes (wall seconds, and CPU seconds of
the process), with their range.  Not a timed test: it prints figures.
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

CORPUS = os.path.expanduser("~/.cache/txnsafety-corpus/unpacked")
DEFAULT = "Weblate-5.14.3-wheel"
CACHE = ".txnsafety_cache"


def timed(cmd: list[str], cwd: str) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1) or "Traceback" in proc.stderr:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def pick_file(root: str) -> str:
    """The largest module (not a test) with a ``.save()`` or ``session`` in it: a file someone
    edits."""
    best, size = "", -1
    for directory, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            if not name.endswith(".py") or "test" in name or "test" in directory:
                continue
            path = os.path.join(directory, name)
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
            if (".save(" in text or "session" in text) and len(text) > size:
                best, size = path, len(text)
    return os.path.relpath(best, root)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("project", nargs="?", default=os.path.join(CORPUS, DEFAULT))
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    if not os.path.isdir(args.project):
        raise SystemExit(f"no such project folder: {args.project} (bench_linter_corpus.py "
                         f"unpacks the corpus)")
    lint = [sys.executable, "-m", "txnsafety_lint"]
    flake8 = [sys.executable, "-m", "flake8", "--select", "TXN", "--exit-zero"]
    with tempfile.TemporaryDirectory(prefix="bench-index-") as tmp:
        root = os.path.join(tmp, "project")
        shutil.copytree(args.project, root, symlinks=True)
        subprocess.run(["git", "init", "-q", root], check=True)   # marks the project root
        target = pick_file(root)
        files = sum(1 for _d, _s, names in os.walk(root) for n in names if n.endswith(".py"))
        print(f"project: {args.project} ({files} .py files); edited file: {target}")
        counter = [0]

        def drop_cache() -> None:
            shutil.rmtree(os.path.join(root, CACHE), ignore_errors=True)

        def edit() -> None:
            counter[0] += 1
            with open(os.path.join(root, target), "a", encoding="utf-8") as fh:
                fh.write(f"\n# benchmark edit {counter[0]}\n")

        cases = [
            ("no index (lint . --no-cache)", drop_cache, lint + [".", "--no-cache", "--exit-zero"]),
            ("cold (lint ., index written)", drop_cache, lint + [".", "--exit-zero"]),
            ("warm (lint ., unchanged)", None, lint + [".", "--exit-zero"]),
            ("warm, one file (lint FILE)", None, lint + [target, "--exit-zero"]),
            ("one file edited (lint FILE)", edit, lint + [target, "--exit-zero"]),
            ("flake8 FILE, cold", drop_cache, flake8 + [target]),
            ("flake8 FILE, warm", None, flake8 + [target]),
        ]
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name, _s, _c in cases}
        subprocess.run(lint + [".", "--exit-zero"], cwd=root, capture_output=True)  # warm up
        for _round in range(args.repeat):
            for name, setup, cmd in cases:
                if setup is not None:
                    setup()
                samples[name].append(timed(cmd, root))
    print(f"{'case':34} {'wall s (median, range)':>26} {'cpu s (median)':>15}")
    for name, got in samples.items():
        walls = [w for w, _c in got]
        cpus = [c for _w, c in got]
        print(f"{name:34} {statistics.median(walls):9.2f} ({min(walls):.2f}-{max(walls):.2f})"
              f"{'':6} {statistics.median(cpus):9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
