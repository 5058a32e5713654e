"""How many findings of the precision corpus get a safe fix, an unsafe fix or none, per code
(issue 32's closing figure).

For each judged project of the fresh rounds (a ``round`` in its toml; ``--project NAME`` to
pick some, ``--all`` for every judged project) the release is unpacked from the corpus cache
(``benchmarks/corpus/releases.py``), the working tree's linter runs on it at default
settings in a fresh process and plans each finding's fix as ``--diff`` does
(``benchmarks/corpus/fix_plans.py``: nothing is applied, nothing written under the
release), and the findings are counted per code by applicability, for all findings and for
those judged TP (matched by path, line and code).  A project whose run takes longer than
``--timeout`` seconds (600) is skipped and named.

    python benchmarks/fix_coverage.py [--project NAME ...] [--all] [--markdown]
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterable, Mapping, Optional

from corpus.entries import JudgedProject, Judgment, Label, load_judged
from corpus.linters import REPO, working_tree
from corpus.releases import ReleaseError, unpacked

PLANS = Path(__file__).resolve().parent / "corpus" / "fix_plans.py"
#: the applicabilities, in the columns' order (txnsafety_lint.fix.model.Applicability's values)
GRADES = ("safe", "unsafe", "none")


@dataclasses.dataclass(frozen=True)
class PlannedFinding:
    """A finding and the applicability of its planned fix (one of :data:`GRADES`)."""

    path: str
    line: int
    code: str
    applicability: str
    #: the fixer that wrote the fix (``counters``, ``locked_read``, ``user_lock``,
    #: ``sqla_insert``, ...), "" when none is offered
    fixer: str = ""


@dataclasses.dataclass
class Coverage:
    """Findings per code and applicability: all of them, and those judged TP."""

    everything: dict = dataclasses.field(default_factory=lambda: collections.defaultdict(collections.Counter))
    true_positives: dict = dataclasses.field(default_factory=lambda: collections.defaultdict(collections.Counter))
    #: fixes offered per code, by the fixer that wrote them
    by_fixer: dict = dataclasses.field(default_factory=lambda: collections.defaultdict(collections.Counter))
    #: findings the toml does not judge (the linter changed since it was judged)
    unjudged: int = 0

    def add(self, found: Iterable[PlannedFinding], judgments: Mapping[tuple[str, int, str], Judgment]) -> None:
        for f in found:
            if f.applicability not in GRADES:
                raise ValueError(f"{f.path}:{f.line}: unknown applicability {f.applicability!r}")
            self.everything[f.code][f.applicability] += 1
            if f.fixer:
                self.by_fixer[f.code][f.fixer] += 1
            judged = judgments.get((f.path, f.line, f.code))
            if judged is None:
                self.unjudged += 1
            elif judged.label is Label.TP:
                self.true_positives[f.code][f.applicability] += 1


def table(counts: Mapping[str, collections.Counter], title: str, markdown: bool) -> str:
    """Rows per code (findings, safe, unsafe, none) and a total row."""
    total: collections.Counter = collections.Counter()
    rows = []
    for code in sorted(counts):
        total.update(counts[code])
        rows.append([code, sum(counts[code].values())] + [counts[code][g] for g in GRADES])
    rows.append(["total", sum(total.values())] + [total[g] for g in GRADES])
    head = ["code", "findings", *GRADES]
    if markdown:
        lines = [f"| {' | '.join(head)} |", "|---" * len(head) + "|"]
        lines += [f"| {' | '.join(str(c) for c in row)} |" for row in rows]
        return f"{title}\n\n" + "\n".join(lines) + "\n"
    lines = [f"{head[0]:<8}" + "".join(f"{h:>10}" for h in head[1:])]
    lines += [f"{row[0]:<8}" + "".join(f"{c:>10}" for c in row[1:]) for row in rows]
    return f"{title}\n" + "\n".join(lines) + "\n"


def fixer_table(by_fixer: Mapping[str, collections.Counter], markdown: bool) -> str:
    """Rows per code and fixer: how many fixes each fixer offered."""
    rows = [(code, fixer, n) for code in sorted(by_fixer) for fixer, n in sorted(by_fixer[code].items())]
    title = "Fixes offered, by fixer"
    if markdown:
        lines = ["| code | fixer | fixes |", "|---|---|---|"] + [f"| {c} | {f} | {n} |" for c, f, n in rows]
        return f"{title}\n\n" + "\n".join(lines) + "\n"
    return f"{title}\n" + "\n".join(f"{c:<8}{f:<16}{n:>6}" for c, f, n in rows) + "\n"


def planned(root: Path, timeout: float, pythonpath: Optional[str] = None) -> list[PlannedFinding]:
    """The findings of the linter (on ``pythonpath``, else the installed one) on ``root``,
    each with its fix's applicability (raises ``subprocess.TimeoutExpired``)."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, str(PLANS)], cwd=root, env=env, capture_output=True,
                          text=True, timeout=timeout)
    try:
        out = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise RuntimeError(f"{root.name}: no JSON (exit {proc.returncode}): "
                           f"{proc.stderr.strip()[-800:]}") from None
    return [PlannedFinding(r["path"], int(r["line"]), r["code"], r["applicability"], r.get("fixer", ""))
            for r in out["findings"]]


def chosen(names: list[str], everything: bool) -> list[JudgedProject]:
    projects = load_judged()
    if names:
        known = {p.release.name for p in projects}
        missing = sorted(set(names) - known)
        if missing:
            raise SystemExit(f"no judged project named {', '.join(missing)}")
        return [p for p in projects if p.release.name in names]
    return projects if everything else [p for p in projects if p.round]


def commit() -> str:
    """The checkout's commit, ``+changes`` when the linter's sources differ from it."""
    sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "linter", "txnsafety"],
                           capture_output=True, text=True).stdout.strip()
    return sha + (" +changes" if dirty else "")


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", action="append", default=[], help="a judged project's name (repeatable)")
    parser.add_argument("--all", action="store_true", help="every judged project, not only the fresh rounds")
    parser.add_argument("--timeout", type=float, default=600, help="seconds before a project is skipped")
    parser.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    args = parser.parse_args(argv)
    linter = working_tree()
    coverage = Coverage()
    skipped = []
    started = time.monotonic()
    for project in chosen(args.project, args.all):
        begun = time.monotonic()
        try:
            found = planned(unpacked(project.release), args.timeout, linter.pythonpath)
        except subprocess.TimeoutExpired:
            skipped.append(f"{project.release.label}: over {args.timeout:.0f} s")
            continue
        except (ReleaseError, RuntimeError) as exc:
            skipped.append(f"{project.release.label}: {exc}")
            continue
        coverage.add(found, project.judgments)
        print(f"{project.release.label}: {len(found)} findings, {time.monotonic() - begun:.0f} s",
              file=sys.stderr)
    print(table(coverage.everything, "All findings", args.markdown))
    print(table(coverage.true_positives, "Findings judged TP", args.markdown))
    print(fixer_table(coverage.by_fixer, args.markdown))
    print(f"unjudged findings: {coverage.unjudged}; linter at {commit()}; "
          f"{time.monotonic() - started:.0f} s")
    for line in skipped:
        print(f"skipped {line}")
    return 1 if skipped else 0


if __name__ == "__main__":
    sys.exit(main())
