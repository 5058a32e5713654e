"""Scoring a linter's findings against the corpora: recall, look-alikes, precision, noise."""
from __future__ import annotations

import collections
import dataclasses
from pathlib import Path
from typing import Callable, Optional

from .entries import Bug, JudgedProject, Label, Place
from .linters import Finding
from .releases import ReleaseError
from .spans import function_span

#: (release root, findings of one linter on it) for a place's release
FindingsFor = Callable[[Place], tuple[Path, list[Finding]]]


@dataclasses.dataclass
class BugResult:
    bug: Bug
    caught: Optional[bool]          # None: the entry's function was not found in the release
    lookalike_flagged: Optional[bool]  # None: no look-alike (or not found)
    problem: str = ""


def _in_function(place: Place, root: Path, findings: list[Finding],
                 codes: Optional[frozenset[str]]) -> Optional[bool]:
    span = function_span(root / place.path, place.function)
    if span is None:
        return None
    first, last = span
    return any(f.path == place.path and first <= f.line <= last and (codes is None or f.code in codes)
               for f in findings)


def score_bug(bug: Bug, findings_for: FindingsFor) -> BugResult:
    try:
        return _score_bug(bug, findings_for)
    except ReleaseError as exc:
        return BugResult(bug, None, None, str(exc))


def _score_bug(bug: Bug, findings_for: FindingsFor) -> BugResult:
    root, findings = findings_for(bug.buggy)
    caught = _in_function(bug.buggy, root, findings, bug.codes)
    problem = "" if caught is not None else f"{bug.buggy.path}:{bug.buggy.function} not found"
    flagged = None
    if bug.fixed is not None:
        root, findings = findings_for(bug.fixed)
        flagged = _in_function(bug.fixed, root, findings, None)
        if flagged is None:
            problem += f" look-alike {bug.fixed.path}:{bug.fixed.function} not found"
    return BugResult(bug, caught, flagged, problem.strip())


@dataclasses.dataclass
class PrecisionResult:
    project: JudgedProject
    lines: int
    counts: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    weak: int = 0                   # of the TPs, those judged weak
    unjudged: list[Finding] = dataclasses.field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.counts.values()) + len(self.unjudged)


def score_project(project: JudgedProject, lines: int, findings: list[Finding]) -> PrecisionResult:
    result = PrecisionResult(project, lines)
    for f in findings:
        judged = project.judgments.get((f.path, f.line, f.code))
        if judged is None:
            result.unjudged.append(f)
        else:
            result.counts[judged.label] += 1
            result.weak += judged.weak
    return result


@dataclasses.dataclass(frozen=True)
class Figures:
    """A set of judged projects' figures; a ratio is None when nothing counts toward it."""

    precision: Optional[float]         # TP / (TP + FP)
    strict_precision: Optional[float]  # TPs not weak / (TP + FP)
    noise_share: Optional[float]       # noise / all findings
    findings: int
    unjudged: int


def precision(results: list[PrecisionResult]) -> Figures:
    """The figures over ``results``: findings not yet judged count in no ratio but in ``findings``."""
    tp = sum(r.counts[Label.TP] for r in results)
    weak = sum(r.weak for r in results)
    fp = sum(r.counts[Label.FP] for r in results)
    noise = sum(r.counts[Label.NOISE] for r in results)
    unjudged = sum(len(r.unjudged) for r in results)
    total = tp + fp + noise + unjudged
    judged_real = tp + fp
    return Figures(tp / judged_real if judged_real else None,
                   (tp - weak) / judged_real if judged_real else None,
                   noise / total if total else None, total, unjudged)
