"""Which fix each finding gets: the fixer of its code, checked, else a reason there is none.

A fixer that fails in any way, or whose rewrite alone would leave the file unparsable, gives
no fix: a lint run must never break on a fix, and a ``[*]`` must never promise one that
cannot be applied."""
from __future__ import annotations

import ast
import collections
import dataclasses
import warnings
from typing import Callable, Mapping, Optional, Sequence

from ..facts.model import Finding
from .counters import counter_fix
from .edits import apply_edits, compatible
from .exists_create import exists_create_fix
from .lock_scope import lock_scope_fix
from .locked_read import locked_read_fix
from .model import Fix, no_fix
from .source import FileSource
from .sqla_insert import sqlalchemy_insert_fix
from .user_lock import user_lock_fix, user_lock_fix_where_used

Fixer = Callable[[FileSource, Finding], Optional[Fix]]
#: the findings of a module's text, as (code, enclosing function): what a fix is checked
#: against (the entry point hands the linter's own analysis in; ``fix/`` imports no rule)
Recheck = Callable[[str], Sequence[tuple[str, Optional[str]]]]

#: the fixers, by code (each a module of this package)
FIXERS: Mapping[str, Sequence[Fixer]] = {
    "TXN101": (user_lock_fix_where_used, locked_read_fix, user_lock_fix),
    "TXN102": (user_lock_fix_where_used, locked_read_fix, user_lock_fix),
    "TXN105": (exists_create_fix, sqlalchemy_insert_fix),
    "TXN106": (counter_fix, user_lock_fix_where_used, locked_read_fix, user_lock_fix),
    "TXN108": (lock_scope_fix,),
    "TXN109": (locked_read_fix,),
}

#: why a code has no mechanical fix in general, or when its fixer found no shape it rewrites
WHY_NONE: Mapping[str, str] = {
    "TXN101": "move the read inside the block, locked (select_for_update / with_for_update)",
    "TXN102": "read and write under one protection (a locked read in a transaction, or a lock)",
    "TXN103": "keep one object for the row: no mechanical rewrite chooses which",
    "TXN104": "write inside the transaction or lock that read the row",
    "TXN105": "let a unique constraint or a locked read settle the race",
    "TXN106": "no shape this fix rewrites safely (see docs/codes/TXN106.md for the manual fix)",
    "TXN107": "move the side effect out of the retried transaction (transaction.on_commit)",
    "TXN108": "wrap the read and the write that depends on it in transaction.atomic()",
    "TXN109": "lock the row (select_for_update / with_for_update) or use serializable isolation",
}


def parses(text: str) -> bool:
    """Whether ``text`` is valid Python (what a fix must never break)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(text)
    except (SyntaxError, ValueError):
        return False
    return True


def fix_for(src: FileSource, finding: Finding, recheck: Optional[Recheck] = None) -> Fix:
    """``finding``'s fix in ``src``, or a :data:`~.model.Applicability.NONE` fix saying why.

    ``recheck``: the linter on a text; a fix after which the file has a finding it did not
    have (by code and function), or still has every finding of the fixed one's code and
    function, is no fix."""
    for fixer in FIXERS.get(finding.code, ()):
        try:
            fix = fixer(src, finding)
        except Exception:  # noqa: BLE001 - a fixer's failure is no fix, never a broken run
            fix = None
        if fix is not None and fix.edits and not _holds(src, finding, fix, recheck):
            fix = None
        if fix is not None:
            return dataclasses.replace(fix, kind=fixer.__module__.rsplit(".", 1)[-1]) if fix.edits else fix
    return fix_for_nothing(finding)


def _holds(src: FileSource, finding: Finding, fix: Fix, recheck: Optional[Recheck]) -> bool:
    return _hold_together(src, [(finding, fix)], recheck)


def _hold_together(src: FileSource, pairs: Sequence[tuple[Finding, Fix]],
                   recheck: Optional[Recheck]) -> bool:
    """Whether the fixes of ``pairs`` (non-overlapping), applied together, leave a file that
    parses, has no finding it did not have, and fewer of each fixed one's code and function
    (by as many as were fixed)."""
    new = apply_edits(src.text, [e for _f, fix in pairs for e in fix.edits])
    if not parses(new):
        return False
    if recheck is None:
        return True
    try:
        before = collections.Counter(recheck(src.text))
        after = collections.Counter(recheck(new))
    except Exception:  # noqa: BLE001 - a text the linter cannot judge gets no fix
        return False
    fixed = collections.Counter((f.code, f.function) for f, _fix in pairs)
    return not after - before and all(before[key] == 0 or after[key] <= before[key] - count
                                      for key, count in fixed.items())


def fix_for_nothing(finding: Finding) -> Fix:
    """Why ``finding`` has no fix: its code's reason."""
    return no_fix("no mechanical fix: " + WHY_NONE.get(finding.code, "none known"))


@dataclasses.dataclass
class FilePlan:
    """One file's findings and their fixes, with the source they were computed from (None
    when no finding's code has a fixer, or the file could not be read or parsed:
    ``problem`` says why)."""

    path: str
    source: Optional[FileSource]
    fixes: dict[Finding, Fix]
    problem: str = ""


def plan_file(path: str, findings: Sequence[Finding], recheck: Optional[Recheck] = None) -> FilePlan:
    """Each finding's fix.  The fixes that do not overlap are checked together first (one
    analysis for the file's usual case); when that check fails, each is checked alone."""
    if not any(f.code in FIXERS for f in findings):      # no parse for codes nothing fixes
        return FilePlan(path, None, {f: fix_for_nothing(f) for f in findings})
    try:
        src = FileSource.read(path)
    except (OSError, ValueError, SyntaxError, LookupError) as exc:
        reason = f"no fix: {exc}"
        return FilePlan(path, None, {f: no_fix(reason) for f in findings}, reason)
    first = {f: fix_for(src, f) for f in findings}          # parsed, not yet checked
    if recheck is None:
        return FilePlan(path, src, first)
    ordered = sorted(((f, fix) for f, fix in first.items() if fix.available),
                     key=lambda pair: pair[0].sort_key())
    together: list[tuple[Finding, Fix]] = []
    edits: list = []
    for finding, fix in ordered:
        if compatible(edits, fix.edits):
            together.append((finding, fix))
            edits.extend(e for e in fix.edits if e not in edits)
    if together and _hold_together(src, _dedup(together), recheck):
        checked = {f for f, _fix in together}
        return FilePlan(path, src, {f: fix if f in checked or not fix.available
                                    else fix_for(src, f, recheck) for f, fix in first.items()})
    return FilePlan(path, src, {f: fix if not fix.available else fix_for(src, f, recheck)
                                for f, fix in first.items()})


def _dedup(pairs: list[tuple[Finding, Fix]]) -> list[tuple[Finding, Fix]]:
    """``pairs`` with an edit two fixes share (one added import) kept on the first only."""
    seen: list = []
    out = []
    for finding, fix in pairs:
        own = tuple(e for e in fix.edits if e not in seen)
        seen.extend(own)
        out.append((finding, dataclasses.replace(fix, edits=own)))
    return out
