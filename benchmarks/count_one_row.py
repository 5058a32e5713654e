"""Instructions per one-row accessor call (``ScalarResult.one()``, what ``Session.get()`` ends with): bare,
SQLAlchemy's accessor over the wrapped ``_only_one_row`` (the checker before the twelfth round), and
the replaced accessor (``lookups.ONE_ROW_ACCESSORS``).

A whole request's instruction count moves by one to three points from one memory layout to the
next (docs/performance.md), far more than one Python call a statement is worth; a tight loop of
the one call does not: the same count, to a few instructions, run after run.  Each state is
counted by cachegrind at two numbers of calls, the difference divided by the calls between
(start-up cancels out); the result each call makes is a fresh one-row ``IteratorResult``, made
the same way in every state.

    python benchmarks/count_one_row.py            # the three states, about a minute
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

STATES = ("bare", "wrapped", "replaced")


def serve(state: str, calls: int) -> None:
    """``calls`` one-row results made and asked for their row, the accessors as ``state`` has them."""
    from sqlalchemy.engine import result as sa_result

    from txnsafety.sqlalchemy import events, lookups
    events._install_mapper_events()
    if state == "wrapped":  # SQLAlchemy's own accessors, each calling the wrapped _only_one_row
        for (cls, name), original in lookups._original_accessors.items():
            setattr(cls, name, original)
    elif state == "bare":
        events._uninstall_mapper_events()
    metadata, row = sa_result.SimpleResultMetaData(["item"]), object()
    for _ in range(calls):
        assert sa_result.IteratorResult(metadata, iter([(row,)])).scalars().one() is row


def count(state: str, calls: int) -> int:
    from benchmarks.count_instructions import _tools
    done = subprocess.run([*_tools(), "--cachegrind-out-file=/dev/null", sys.executable, __file__,
                           "--serve", state, str(calls)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONHASHSEED": "0"})
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"count_one_row: {state} failed:\n{done.stdout}{done.stderr[-3000:]}")
    return int(found.group(1).replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", nargs=2, metavar=("STATE", "CALLS"), help=argparse.SUPPRESS)
    parser.add_argument("--calls", nargs=2, type=int, default=(1000, 11000), metavar=("LOW", "HIGH"))
    args = parser.parse_args()
    if args.serve:
        serve(args.serve[0], int(args.serve[1]))
        return
    low, high = args.calls
    per_call = {state: (count(state, high) - count(state, low)) / (high - low) for state in STATES}
    for state in STATES:
        print(f"  {state:<10}{per_call[state]:>10.0f} instructions per result made and one() asked"
              f"{per_call[state] - per_call['bare']:>+8.0f} over bare")


if __name__ == "__main__":
    main()
