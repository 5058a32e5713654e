"""Text edits from a rewritten module, and several fixes' edits applied to one text.

A fix is computed as a libcst rewrite of the whole module (formatting, comments and line
endings of everything it does not touch are kept by libcst); what it changed is then read
back as line edits (:func:`line_edits`), so that fixes of several findings in one file can
be applied together when their lines do not overlap, and shown as a diff or a SARIF
replacement."""
from __future__ import annotations

import difflib
import re
from typing import Iterable, Sequence

from .model import Edit, Fix

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


def split_lines(text: str) -> list[str]:
    """Lines with their endings, split only where Python ends a line (not at ``\\f``)."""
    return _LINE.findall(text)


def line_edits(old: str, new: str) -> tuple[Edit, ...]:
    """The smallest line replacements that turn ``old`` into ``new``."""
    a, b = split_lines(old), split_lines(new)
    out = []
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            out.append(Edit(i1 + 1, i2 + 1, "".join(b[j1:j2])))
    return tuple(out)


def compatible(chosen: Sequence[Edit], edits: Iterable[Edit]) -> bool:
    """Whether ``edits`` can be applied beside ``chosen`` (equal edits are one edit)."""
    return not any(e.overlaps(c) for e in edits for c in chosen)


def select(fixes: Sequence[Fix]) -> tuple[list[Fix], list[Edit]]:
    """The fixes whose edits do not overlap, first come first served, and their edits
    (an edit two fixes share, such as one added import, counted once)."""
    chosen_fixes: list[Fix] = []
    edits: list[Edit] = []
    for fix in fixes:
        if compatible(edits, fix.edits):
            chosen_fixes.append(fix)
            edits.extend(e for e in fix.edits if e not in edits)
    return chosen_fixes, edits


def apply_edits(text: str, edits: Sequence[Edit]) -> str:
    """``text`` with ``edits`` (non-overlapping) applied, last first so lines keep numbers."""
    lines = split_lines(text)
    for edit in sorted(edits, key=lambda e: (e.start_line, e.end_line), reverse=True):
        lines[edit.start_line - 1:edit.end_line - 1] = split_lines(edit.content)
    return "".join(lines)
