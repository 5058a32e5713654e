"""``--diff``: what ``--fix`` would change, as a unified diff (nothing is written)."""
from __future__ import annotations

import difflib

from .edits import split_lines


def unified(path: str, old: str, new: str) -> str:
    lines = difflib.unified_diff(split_lines(old), split_lines(new), fromfile=f"a/{path}",
                                 tofile=f"b/{path}")
    out = []
    for line in lines:
        out.append(line if line.endswith(("\n", "\r")) else line + "\n\\ No newline at end of file\n")
    return "".join(out)
