"""``txnsafety lint --fix`` / ``--unsafe-fixes`` / ``--diff``: the fixes of a run's findings,
applied or shown.  The rewrites are :mod:`.fix`'s; this module reads the files the findings
point at, applies pass after pass (a fix that overlapped another waits for the next pass,
after the file is linted again) and says what it did."""
from __future__ import annotations

import ast
import collections
import dataclasses
import os
from typing import Callable, Iterable, Optional, Sequence

from .analysis import analyze_source
from .facts.config import Config
from .facts.model import Finding
from .fix.apply import Outcome, fixed, write
from .fix.diff import unified
from .fix.model import Applicability, Fix
from .fix.plan import FilePlan, Recheck, plan_file
from .report.identity import with_functions

#: passes of fix-then-lint-again before giving up (each applies at least one fix)
MAX_PASSES = 10


def file_path(shown: str, root: str) -> str:
    """The file a finding's root-relative path names."""
    native = shown.replace("/", os.sep)
    return native if os.path.isabs(native) else os.path.join(root, native)


def rechecker(cfg: Optional[Config]) -> Recheck:
    """The linter on one module's text, each finding as (code, enclosing function): what a
    fix is checked against (no finding it did not have, fewer of the one it fixes)."""
    seen: dict[str, list[tuple[str, Optional[str]]]] = {}

    def recheck(text: str) -> list[tuple[str, Optional[str]]]:
        if text not in seen:            # a file's own text is asked once per fix
            found = with_functions(analyze_source(text, cfg, "fix.py"), ast.parse(text))
            seen[text] = [(f.code, f.function) for f in found]
        return seen[text]
    return recheck


def plan(findings: Sequence[Finding], root: str, cfg: Optional[Config] = None) -> list[FilePlan]:
    """Every finding's fix, file by file, each checked by the linter (:func:`rechecker`)."""
    by_file: dict[str, list[Finding]] = collections.defaultdict(list)
    for f in findings:
        by_file[f.path].append(f)
    recheck = rechecker(cfg)
    return [plan_file(file_path(shown, root), found, recheck) for shown, found in by_file.items()]


def fixes_of(plans: Iterable[FilePlan]) -> dict[Finding, Fix]:
    return {f: fix for p in plans for f, fix in p.fixes.items()}


@dataclasses.dataclass
class FixSummary:
    """What ``--fix`` did: fixes applied, files written, problems (one line each)."""

    applied: int = 0
    files: set = dataclasses.field(default_factory=set)
    problems: list = dataclasses.field(default_factory=list)
    #: what the user must still do for an applied fix (``path: note: ...``)
    notes: list = dataclasses.field(default_factory=list)


def apply_pass(plans: Sequence[FilePlan], unsafe_fixes: bool, summary: FixSummary) -> int:
    """Apply what applies in each file; the number of fixes written."""
    written = 0
    for p in plans:
        outcome = fixed(p, unsafe_fixes)
        problem = outcome.problem or write(p, outcome)
        if problem:
            summary.problems.append(f"{p.path}: {problem}")
        elif outcome.new is not None:
            written += len(outcome.applied)
            summary.files.add(p.path)
            summary.notes += [f"{p.path}: note: {fix.note}" for fix in outcome.applied if fix.note]
    summary.applied += written
    return written


def fix_until_done(findings: list[Finding], lint: Callable[[], list[Finding]], root: str,
                   unsafe_fixes: bool, cfg: Optional[Config] = None) -> tuple[list[Finding], FixSummary]:
    """Fix ``findings``, lint again, fix again, until a pass fixes nothing; the findings
    that remain."""
    summary = FixSummary()
    for _ in range(MAX_PASSES):
        if not apply_pass(plan(findings, root, cfg), unsafe_fixes, summary):
            break
        findings = lint()
    return findings, summary


def diff(plans: Sequence[FilePlan], unsafe_fixes: bool) -> tuple[str, int, list[str]]:
    """The unified diff of the fixes ``--fix`` would apply in one pass, how many, and their
    notes (what the user must still do)."""
    parts = []
    notes: list[str] = []
    count = 0
    for p in sorted(plans, key=lambda p: p.path):
        outcome: Outcome = fixed(p, unsafe_fixes)
        if outcome.new is not None:
            shown = os.path.relpath(p.path) if not os.path.relpath(p.path).startswith("..") else p.path
            parts.append(unified(shown.replace(os.sep, "/"), outcome.old, outcome.new))
            count += len(outcome.applied)
            notes += [f"{shown}: note: {fix.note}" for fix in outcome.applied if fix.note]
    return "".join(parts), count, notes


def fixable_line(fixes: dict[Finding, Fix], unsafe_fixes: bool) -> str:
    """``3 fixable with --fix (1 more with --unsafe-fixes)``, or "" when nothing is."""
    safe = sum(1 for fix in fixes.values() if fix.available and fix.applicability.applies(unsafe_fixes))
    hidden = sum(1 for fix in fixes.values() if fix.available and not unsafe_fixes
                 and fix.applicability is Applicability.UNSAFE)
    if not safe and not hidden:
        return ""
    more = f" ({hidden} more with --unsafe-fixes)" if hidden else ""
    flag = "--fix --unsafe-fixes" if unsafe_fixes else "--fix"
    return f"{safe} fixable with {flag}{more}\n"
