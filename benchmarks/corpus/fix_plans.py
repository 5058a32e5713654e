"""Each finding of a project with the applicability of the fix ``txnsafety lint`` plans for it.

Run as a script, in a fresh process, from the project's root, with the linter under test
first on ``PYTHONPATH`` (``linters.working_tree()``); prints JSON rows ``{path, line, code,
applicability, fixer}`` (``safe`` / ``unsafe`` / ``none``; the module of the fixer that
wrote an available fix, else "") on stdout::

    python benchmarks/corpus/fix_plans.py

It does what ``txnsafety lint .`` does at default settings, then plans the fixes as the
text report's ``[*]`` marks, ``--diff`` and the first pass of ``--fix`` do
(``fixing.plan``), and stops there: nothing is applied, and the project index is off, so
nothing is written under the project (a corpus release stays as PyPI shipped it).  A fix
counts as safe or unsafe only when it is *available* (it has edits that passed the
linter's own recheck); any other finding counts as none.

A script, not an import of the parent process, so that the linter measured is the one
on ``PYTHONPATH`` (the working tree's, whatever is pip-installed) and a slow project can be
stopped by a timeout."""
from __future__ import annotations

import json
import sys

from txnsafety_lint.fix.model import Applicability, Fix
from txnsafety_lint.fixing import fixes_of, plan
from txnsafety_lint.runner import lint_paths
from txnsafety_lint.selection.settings import load_settings


def grade(fix: Fix | None) -> Applicability:
    """What ``--fix`` could do for a finding: its fix's applicability, or NONE when there is
    no fix with edits (a fixer found no shape it rewrites, or its rewrite failed the check)."""
    if fix is None or not fix.available:
        return Applicability.NONE
    return fix.applicability


def _fixer(fix: Fix | None) -> str:
    return fix.kind if fix is not None and fix.available else ""


def main() -> int:
    settings = load_settings(".")
    run = lint_paths(["."], settings, cache=False)
    fixes = fixes_of(plan(run.findings, settings.root, settings.analysis)) if run.findings else {}
    rows = [{"path": f.path.replace("\\", "/").removeprefix("./"), "line": f.line, "code": f.code,
             "applicability": grade(fixes.get(f)).value, "fixer": _fixer(fixes.get(f))} for f in run.findings]
    json.dump({"findings": rows, "errors": run.errors}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
