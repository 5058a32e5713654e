"""Many tests' reports as a few distinct ones: the summary of an adoption run.

Used by the pytest plugin's ``report`` mode and the Django test runner: a suite
switched on for the first time reports the same racy line from dozens of tests, a
helper run in every test's setup hundreds of times; what a user triages is each
distinct place (code, model, sites) once, with how many reports and tests hit it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from .report import Violation


@dataclass
class ReportGroup:
    """One distinct report (a place), the tests that produced it and how many times."""

    violation: Violation
    tests: list[str] = field(default_factory=list)
    count: int = 0

    def render(self) -> str:
        v = self.violation
        example = self.tests[0]
        more = f" and {len(self.tests) - 1} more" if len(self.tests) > 1 else ""
        times = f"{self.count} report(s) in " if self.count > len(self.tests) else ""
        lines = [f"{v.code.value} {v.kind}: {v.model}  ({times}{len(self.tests)} test(s): {example}{more})"]
        if v.read_site:
            lines.append(f"  read at  {v.read_site}")
        if v.write_site:
            lines.append(f"  write at {v.write_site}")
        if v.other_write_site:
            lines.append(f"  other write at {v.other_write_site}")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, object]:
        """JSON-ready: the first report of the place, with ``count`` and ``tests``."""
        return {**self.violation.as_dict(), "count": self.count, "tests": list(self.tests)}


def group_reports(reported: Iterable[tuple[str, Violation]]) -> list[ReportGroup]:
    """Distinct reports, most tests first; every report counts, a test is listed once."""
    groups: dict[tuple[object, ...], ReportGroup] = {}
    for test, violation in reported:
        group = groups.setdefault(violation.dedupe_key(), ReportGroup(violation))
        group.count += 1
        if test not in group.tests:
            group.tests.append(test)
    return sorted(groups.values(), key=lambda g: (-len(g.tests), -g.count, g.violation.code.value,
                                                  g.violation.model))
