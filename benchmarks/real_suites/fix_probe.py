"""Whether a project's suite runs the code a fix wrote: a ``raise`` after each locked read.

    python benchmarks/real_suites/fix_probe.py FILE...

A suite that stays green after ``--fix`` proves something only if it runs the fixed lines.
This writes ``raise RuntimeError("txnsafety fix probe")`` right after every statement of the
given files (a copy of the files the fix changed) that reads a row locked
(``select_for_update()``, ``with_for_update=True``); the suite run on them must then fail
where it passed.  Prints each file probed; exit 1 when none had a locked read."""
from __future__ import annotations

import re
import sys
from pathlib import Path

_LOCKED = re.compile(r"^(?P<indent>\s+)\w+(?:, \w+)? = .*(?:select_for_update\(\)|with_for_update=True)")


def probed(lines: list[str]) -> list[str]:
    """``lines`` with the raise after each locked read (after its closing parenthesis)."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        out.append(lines[i])
        m = _LOCKED.match(lines[i])
        if m:
            depth = lines[i].count("(") - lines[i].count(")")
            while depth > 0 and i + 1 < len(lines):
                i += 1
                out.append(lines[i])
                depth += lines[i].count("(") - lines[i].count(")")
            out.append(f'{m["indent"]}raise RuntimeError("txnsafety fix probe")\n')
        i += 1
    return out


def main(paths: list[str]) -> int:
    hit = 0
    for name in paths:
        path = Path(name)
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        new = probed(lines)
        if new != lines:
            path.write_text("".join(new), encoding="utf-8")
            hit += 1
            print(f"probed {path}")
    return 0 if hit else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
