"""What one run of a project's own suite gave, and which tests a fixed copy newly fails.

    python benchmarks/real_suites/fix_suite_outcomes.py BEFORE.txt [AFTER.txt]

Reads the output of pytest (``-rfE``: the ``FAILED id`` / ``ERROR id`` summary lines) or of
Django's test runner (``ERROR: test (Class)`` / ``FAIL: test (Class)`` headers, ``Ran N
tests``), prints ``passed N, failed M`` for each file and, given two, the tests that fail
after but passed before: the proof of ``run_fix_suites.sh`` is that this list is empty.
Exit 1 when it is not (or a run has no result line: a suite that did not run proves
nothing)."""
from __future__ import annotations

import dataclasses
import re
import sys
from typing import Optional

_PYTEST_FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.M)
_PYTEST_COUNT = re.compile(r"(\d+) (passed|failed|errors?)\b")
_PYTEST_TAIL = re.compile(r"^=*\s*(?:\d+ (?:passed|failed|errors?|skipped)[^\n]*) in [\d.]+s", re.M)
_UNITTEST_FAILED = re.compile(r"^(?:ERROR|FAIL): (\S+) \(([^)]+)\)", re.M)
_UNITTEST_RAN = re.compile(r"^Ran (\d+) tests? in", re.M)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One suite run: how many tests passed, and the ids of those that failed or erred."""

    passed: int
    failed: frozenset

    def line(self) -> str:
        return f"passed {self.passed}, failed {len(self.failed)}"


def outcome(text: str) -> Optional[Outcome]:
    """The run's outcome, or None when the output holds no result line (it did not run)."""
    ran = _UNITTEST_RAN.search(text)
    if ran:
        failed = frozenset(f"{cls}.{name}" for name, cls in _UNITTEST_FAILED.findall(text))
        return Outcome(int(ran[1]) - len(failed), failed)
    tails = _PYTEST_TAIL.findall(text)
    if not tails:
        return None
    counts = {kind.rstrip("s"): int(n) for n, kind in _PYTEST_COUNT.findall(tails[-1])}
    return Outcome(counts.get("passed", 0), frozenset(_PYTEST_FAILED.findall(text)))


def main(argv: list[str]) -> int:
    runs = []
    for path in argv:
        with open(path, encoding="utf-8", errors="replace") as fh:
            found = outcome(fh.read())
        if found is None:
            print(f"{path}: no result line (the suite did not run)")
            return 1
        runs.append(found)
        print(f"{path}: {found.line()}")
    if len(runs) == 2:
        newly = sorted(runs[1].failed - runs[0].failed)
        print("newly failing: " + (", ".join(newly) if newly else "none"))
        return 1 if newly else 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
