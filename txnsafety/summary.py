"""Many tests' reports as a few distinct ones: the summary of an adoption run.

Used by the pytest plugin's ``report`` mode and the Django test runner: a suite
switched on for the first time reports the same racy line from dozens of tests;
what a user triages is each distinct (code, model, sites) once, with how many tests hit it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from .report import Violation


@dataclass
class ReportGroup:
    """One distinct report and the tests that produced it."""

    violation: Violation
    tests: list[str] = field(default_factory=list)

    def render(self) -> str:
        v = self.violation
        example = self.tests[0]
        more = f" and {len(self.tests) - 1} more" if len(self.tests) > 1 else ""
        lines = [f"{v.code.value} {v.kind}: {v.model}  ({len(self.tests)} test(s): {example}{more})"]
        if v.read_site:
            lines.append(f"  read at  {v.read_site}")
        if v.write_site:
            lines.append(f"  write at {v.write_site}")
        if v.other_write_site:
            lines.append(f"  other write at {v.other_write_site}")
        return "\n".join(lines)


def group_reports(reported: Iterable[tuple[str, Violation]]) -> list[ReportGroup]:
    """Distinct reports, most tests first; a test counts once per report."""
    groups: dict[tuple[object, ...], ReportGroup] = {}
    for test, violation in reported:
        group = groups.setdefault(violation.dedupe_key(), ReportGroup(violation))
        if test not in group.tests:
            group.tests.append(test)
    return sorted(groups.values(), key=lambda g: (-len(g.tests), g.violation.code.value, g.violation.model))
