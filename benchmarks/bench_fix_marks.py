"""Benchmark: what planning the fixes costs a plain ``txnsafety lint`` run (issue 32).

The text report marks every finding ``--fix`` would fix (``[*]``), so a text run plans the
fixes of every finding whose code has a fixer: a libcst parse of each such file and one
analysis of the file as each fix would leave it (the check that a fix brings no new finding).
``--format json`` plans nothing.  This times both, as fresh processes taking turns, on a
copy of a project (``fixtures/lint`` by default, or a folder such as a corpus release from
``~/.cache/txnsafety-corpus/unpacked/``), index off:

* ``json``: ``txnsafety lint . --no-cache --format json`` (the run, no fixes),
* ``text``: ``txnsafety lint . --no-cache`` (the run, fixes planned for the marks).

    python benchmarks/bench_fix_marks.py [PROJECT] [--repeat N]

Each figure is the median of ``--repeat`` processes' CPU seconds (user + system), with the
range, and the ratio text/json per pair, median and range.  Not a timed test: it prints
figures.
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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_of(cmd: list[str], cwd: str) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1) or "Traceback" in proc.stderr:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("project", nargs="?", default=os.path.join(ROOT, "fixtures", "lint"))
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="txnsafety-fixbench-") as tmp:
        work = os.path.join(tmp, "project")
        shutil.copytree(args.project, work, ignore=shutil.ignore_patterns(".txnsafety_cache"))
        subprocess.run(["git", "init", "-q", work], check=True)
        base = [sys.executable, "-m", "txnsafety_lint", ".", "--no-cache"]
        findings = subprocess.run(base + ["--format", "json"], cwd=work, capture_output=True,
                                  text=True).stdout.count('"code"')
        times: dict[str, list[float]] = {"json": [], "text": []}
        for i in range(args.repeat):
            order = ["json", "text"] if i % 2 == 0 else ["text", "json"]
            for name in order:
                extra = ["--format", "json"] if name == "json" else []
                times[name].append(cpu_of(base + extra, work))
        ratios = [t / j for t, j in zip(times["text"], times["json"])]
        print(f"{os.path.basename(os.path.normpath(args.project))}: {findings} finding(s), "
              f"{args.repeat} process(es) each, CPU seconds")
        for name, values in times.items():
            print(f"  {name:5} median {statistics.median(values):6.2f} s  "
                  f"(range {min(values):.2f}-{max(values):.2f})")
        print(f"  text/json median {statistics.median(ratios):.2f} "
              f"(range {min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main()
