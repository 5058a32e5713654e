"""benchmarks/bench_rows.py runs: the 200-row lists and every contender docs/performance.md names.

A smoke test, a few seconds: two rounds in this process, then one contender served
untimed as valgrind runs it.  The script itself fails if the checker reports anything
on the lists (they are read only, so a report would be a false positive).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = str(REPO / "benchmarks" / "bench_rows.py")


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, SCRIPT, *args], cwd=REPO, capture_output=True, text=True, timeout=300)


def test_the_comparison_runs_and_reports_per_row_costs():
    done = _run("--processes", "1", "--rounds", "2", "--per-round", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    for line in ("django checked: ", "django off: ", "django sampled: ", "sqlalchemy empty load: ",
                 "sqlalchemy checked: ", "sqlalchemy sampled: "):
        assert line in done.stdout and "us per row" in done.stdout.split(line)[1].splitlines()[0], done.stdout


def test_each_named_contender_can_be_served_alone():
    names = _run("--list").stdout.splitlines()
    assert names == ["django", "django off", "django checked", "django sampled", "sqlalchemy",
                     "sqlalchemy empty load", "sqlalchemy off", "sqlalchemy checked", "sqlalchemy sampled"]
    done = _run("--loop", "django checked", "--calls", "2")
    assert done.returncode == 0 and done.stdout == "", done.stdout + done.stderr
