"""What the command prints besides the findings: colour, statistics, the "not shown" line."""
from __future__ import annotations

import collections
import os
from typing import Iterable, Mapping, Sequence, TextIO

from txnsafety.codes import CODES

from ..facts.model import Confidence, Finding, Severity
from ..selection.roles import QuietGroup


def use_color(choice: str, stream: TextIO) -> bool:
    """``--color``: ``always``/``never`` as told; ``auto`` colours a terminal only, unless
    ``NO_COLOR`` is set (no-color.org) or ``FORCE_COLOR`` is (force-color.org)."""
    if choice == "always":
        return True
    if choice == "never":
        return False
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def statistics(findings: Iterable[Finding]) -> str:
    """flake8's ``--statistics``: one line per code, ``count  code  kind``, by code."""
    counts = collections.Counter(f.code for f in findings)
    return "".join(f"{counts[code]:<5} {code} {CODES[code].kind}\n" for code in sorted(counts))


def not_shown(hidden: Mapping[QuietGroup, int], below: int = 0,
              threshold: Confidence = Confidence.MEDIUM, below_severity: int = 0,
              severity: Severity = Severity.MEDIUM) -> str:
    """The one closing line about findings left out by role, confidence or severity, or ""
    when none were.

    ``12 findings not shown: 9 in tests, 3 below confidence medium (--include-tests,
    --min-confidence low to show them)``"""
    total = sum(hidden.values()) + below + below_severity
    if not total:
        return ""
    groups = [g for g in QuietGroup if hidden.get(g)]
    parts = [f"{hidden[g]} in {g.value}" for g in groups]
    flags = [g.option for g in groups]
    if below:
        parts.append(f"{below} below confidence {threshold.label}")
        flags.append(f"--min-confidence {Confidence(max(threshold - 1, Confidence.LOW)).label}")
    if below_severity:
        parts.append(f"{below_severity} below severity {severity.label}")
        flags.append(f"--min-severity {Severity(max(severity - 1, Severity.LOW)).label}")
    noun = "finding" if total == 1 else "findings"
    return f"{total} {noun} not shown: {', '.join(parts)} ({', '.join(flags)} to show them)\n"


def severity_summary(findings: Sequence[Finding]) -> str:
    """The closing line by severity, most worth fixing first: ``3 findings: 1 high, 2
    medium``; "" when there are none."""
    if not findings:
        return ""
    counts = collections.Counter(f.severity for f in findings)
    parts = [f"{counts[s]} {s.label}" for s in sorted(counts, reverse=True)]
    noun = "finding" if len(findings) == 1 else "findings"
    return f"{len(findings)} {noun} by severity: {', '.join(parts)}\n"
