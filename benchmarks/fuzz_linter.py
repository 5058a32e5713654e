"""The linter on thousands of generated programs: how many, and how many crashed (0).

    python benchmarks/fuzz_linter.py            # 5,000 programs (scale 20), about 4 minutes
    python benchmarks/fuzz_linter.py --scale 5  # quicker

Runs the fuzz tests of ``tests/linter/test_fuzz.py`` (hypothesmith's grammar and node
programs, programs built from the linter's own vocabulary, and projects of several such
modules analysed together) with ``--scale`` times their usual number of examples, and
prints the count per source and the crashes.  CI runs the same tests at scale 1.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=int, default=20, help="times the tests' example counts")
    args = parser.parse_args(argv)
    os.environ["TXNSAFETY_FUZZ_SCALE"] = str(args.scale)
    sys.path.insert(0, str(REPO))
    import pytest
    from tests.linter import test_fuzz

    started = time.perf_counter()
    code = pytest.main(["-q", "-p", "no:cacheprovider", "-x", str(REPO / "tests/linter/test_fuzz.py")])
    took = time.perf_counter() - started
    runs = test_fuzz.RUNS
    total = sum(runs.values())
    print(f"\n{total} generated programs in {took:.0f} s: {runs['analysed']} analysed as modules, "
          f"{runs['projects']} projects of 2-4 modules, {runs['not Python']} not valid Python "
          f"(skipped by design); crashes: {0 if code == 0 else 'see above'}")
    return int(code)


if __name__ == "__main__":
    raise SystemExit(main())
