"""Fixes applied to a file: only to the text they were computed from, only if the result
parses, written with the file's own encoding (line endings are the file's: the edits carry
them)."""
from __future__ import annotations

import dataclasses
import os
import tempfile
from typing import Optional

from .edits import apply_edits, select
from .model import Fix
from .plan import FilePlan, parses
from .source import digest


@dataclasses.dataclass
class Outcome:
    """What fixing one file gave: the fixes applied, the new text (None: unchanged), or why
    nothing was written."""

    path: str
    applied: list[Fix]
    old: str = ""
    new: Optional[str] = None
    problem: str = ""


def fixed(plan: FilePlan, unsafe_fixes: bool) -> Outcome:
    """The file's text with every applicable fix whose lines no earlier fix touched (the
    rest wait for the next pass), in the order of the findings."""
    src = plan.source
    if src is None:
        return Outcome(plan.path, [], problem=plan.problem)
    wanted = [fix for finding, fix in sorted(plan.fixes.items(), key=lambda kv: kv[0].sort_key())
              if fix.available and fix.applicability.applies(unsafe_fixes)]
    chosen, edits = select(wanted)
    if not chosen:
        return Outcome(plan.path, [], src.text)
    new = apply_edits(src.text, edits)
    if not parses(new):
        return Outcome(plan.path, [], src.text, problem="not fixed: the fixed file would not parse")
    return Outcome(plan.path, chosen, src.text, None if new == src.text else new)


def write(plan: FilePlan, outcome: Outcome) -> Optional[str]:
    """Write ``outcome.new`` over the file, unless the file changed since it was read for
    linting (its bytes are compared); the problem, or None when written."""
    src = plan.source
    if src is None or outcome.new is None:
        return None
    try:
        with open(plan.path, "rb") as fh:
            if digest(fh.read()) != src.digest:
                return "not fixed: the file changed since it was linted"
        data = src.encode(outcome.new)
        directory = os.path.dirname(os.path.abspath(plan.path))
        mode = os.stat(plan.path).st_mode
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".txnsafety-fix-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.chmod(tmp, mode)
            os.replace(tmp, plan.path)
        except BaseException:
            os.unlink(tmp)
            raise
    except (OSError, UnicodeEncodeError) as exc:
        return f"not fixed: {exc}"
    return None
