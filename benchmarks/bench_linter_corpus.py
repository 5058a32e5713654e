"""The linter on real code from PyPI: recall on real bugs, precision on judged projects.

    python benchmarks/bench_linter_corpus.py                  # the working tree's linter
    python benchmarks/bench_linter_corpus.py --against 4b6eebc  # side by side with a revision
    python benchmarks/bench_linter_corpus.py --half test        # the test half: once, at the end

Downloads each pinned release once (cache: ``~/.cache/txnsafety-corpus``), runs
``txnsafety lint`` on it at default settings and prints, for each linter:

* **recall** on the bug corpus (``benchmarks/corpus/bugs/``): real lost-write and
  check-then-act bugs from the projects' fix history, caught when a finding with an
  expected code lies in the buggy function; **look-alikes flagged**: the same
  functions after the fix with any finding;
* **precision** TP / (TP + FP) and the **noise share** on the precision corpus
  (``benchmarks/corpus/precision/``), every finding judged by hand; findings not yet
  judged are listed (``--unjudged``) and count in neither; **strict precision**
  counts only the TPs not judged ``weak``.

Both corpora are split once into a tune half and a test half (``corpus/halves.py``).
The default scores the tune half only: work on the linter reads that half, and the
test half is scored on purpose, at the end (``--half test``, or ``--half all``).
Projects of a fresh round (``round`` in their ``[project]``) stand outside the split:
their figures are printed per round, apart from the old (tuning) set's.

See ``benchmarks/corpus/README.md`` for the formats and the rubric.
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import sys
from pathlib import Path
from typing import Optional

from corpus.entries import CorpusError, JudgedProject, Label, load_bugs, load_judged
from corpus.halves import Half
from corpus.linters import Finding, Linter, at_revision, working_tree
from corpus.releases import Release, ReleaseError, python_lines, unpacked
from corpus.score import BugResult, Figures, PrecisionResult, precision, score_bug, score_project


def _pct(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{value:.2f}"


class Runs:
    """Each (linter, release) linted once, two at a time (the machine has two cores)."""

    def __init__(self, linters: list[Linter], releases: set[Release]):
        self.roots: dict[Release, Path] = {}
        self.problems: dict[Release, str] = {}
        for release in sorted(releases, key=lambda r: (r.name, r.version)):
            try:
                self.roots[release] = unpacked(release)
            except ReleaseError as exc:
                self.problems[release] = str(exc)
                print(f"  {release.label}: {exc}", file=sys.stderr)
        self.findings: dict[tuple[str, Release], list[Finding]] = {}
        jobs = [(linter, release) for release in self.roots for linter in linters]
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            futures = {pool.submit(linter.run, self.roots[release]): (linter.label, release)
                       for linter, release in jobs}
            for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
                key = futures[future]
                self.findings[key] = future.result()
                print(f"\r  linted {done}/{len(jobs)}", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)

    def of(self, linter: Linter):
        def findings_for(place):
            if place.release in self.problems:
                raise ReleaseError(self.problems[place.release])
            return self.roots[place.release], self.findings[(linter.label, place.release)]
        return findings_for


def bug_table(linters: list[Linter], runs: Runs, bugs, half: str) -> dict[str, list[BugResult]]:
    results = {linter.label: [score_bug(bug, runs.of(linter)) for bug in bugs] for linter in linters}
    print(f"\n== bug corpus, {_half_name(half)}: {len(bugs)} bugs from {len({b.project for b in bugs})} projects, "
          f"{sum(1 for b in bugs if b.fixed)} look-alikes")
    header = "".join(f"{linter.label:>14}" for linter in linters)
    print(f"{'bug':44}{'shape':22}{header}")
    for i, bug in enumerate(bugs):
        cells = ""
        for linter in linters:
            r = results[linter.label][i]
            caught = "?" if r.caught is None else ("caught" if r.caught else "-")
            look = "" if r.lookalike_flagged is None else ("/FLAGGED" if r.lookalike_flagged else "/ok")
            cells += f"{caught + look:>14}"
        print(f"{bug.id[:43]:44}{bug.shape[:21]:22}{cells}")
        problem = results[linters[0].label][i].problem
        if problem:
            print(f"    ! {problem}")
    return results


def bug_summary(linters: list[Linter], results: dict[str, list[BugResult]]) -> None:
    for linter in linters:
        rs = [r for r in results[linter.label] if r.caught is not None]
        caught = sum(1 for r in rs if r.caught)
        looks = [r for r in rs if r.lookalike_flagged is not None]
        flagged = sum(1 for r in looks if r.lookalike_flagged)
        by_shape = collections.Counter(r.bug.shape for r in rs)
        hit_shape = collections.Counter(r.bug.shape for r in rs if r.caught)
        shapes = ", ".join(f"{s} {hit_shape[s]}/{n}" for s, n in by_shape.most_common())
        print(f"  {linter.label}: recall {caught}/{len(rs)} = {_pct(caught / len(rs) if rs else None)}; "
              f"look-alikes flagged {flagged}/{len(looks)}")
        print(f"      by shape: {shapes}")


def _half_name(half: str) -> str:
    return "both halves" if half == "all" else f"{half} half"


def _figures_line(figures: Figures) -> str:
    return (f"precision {_pct(figures.precision)}; strict precision {_pct(figures.strict_precision)}; "
            f"noise share {_pct(figures.noise_share)}; {figures.findings} findings, "
            f"{figures.unjudged} not yet judged")


def _project_line(got: PrecisionResult, linter: Linter) -> str:
    c, project = got.counts, got.project
    where = f"round {project.round}" if project.round else f"{project.half.value} half"
    return (f"  {project.release.label:34} {got.lines:>8} lines  {linter.label:>10}: {got.total:>4} findings "
            f"TP {c[Label.TP]:>3} (weak {got.weak:>2}) FP {c[Label.FP]:>3} noise {c[Label.NOISE]:>3} "
            f"unjudged {len(got.unjudged):>3}  [{where}]")


def _groups(projects: list[JudgedProject], half: str) -> dict[str, list[JudgedProject]]:
    """The old (tuning) set in the chosen half, then each fresh round, by name (empty ones left out)."""
    old = [p for p in projects if not p.round]
    groups = {f"old set, {_half_name(half)}": old} if old else {}
    for project in sorted((p for p in projects if p.round), key=lambda p: p.round):
        key = f"round {project.round} (judged before change at {project.judged_before_change})"
        groups.setdefault(key, []).append(project)
    return groups


def precision_table(linters: list[Linter], runs: Runs, projects, show_unjudged: bool, half: str) -> None:
    print(f"\n== precision corpus, {_half_name(half)} and fresh rounds: {len(projects)} projects")
    per: dict[tuple[str, str], PrecisionResult] = {}
    for project in projects:
        if project.release in runs.problems:
            print(f"  {project.release.label}: {runs.problems[project.release]}")
            continue
        lines = python_lines(runs.roots[project.release])
        for linter in linters:
            got = score_project(project, lines, runs.findings[(linter.label, project.release)])
            per[(linter.label, project.release.name)] = got
            print(_project_line(got, linter))
    for group, members in _groups(projects, half).items():
        print(f"  {group}: {len(members)} projects")
        for linter in linters:
            results = [per[key] for key in ((linter.label, p.release.name) for p in members) if key in per]
            print(f"    {linter.label}: {_figures_line(precision(results))}")
    if show_unjudged:
        for (label, name), got in per.items():
            for f in got.unjudged if label == linters[0].label else ():
                print(f"    unjudged {name}: {f.path}:{f.line} {f.code} {f.message[:160]}")


def in_half(bugs, projects, half: str):
    """The bugs and the split projects of ``half`` ("all": both), and every fresh round's project."""
    if half == "all":
        return bugs, projects
    return ([b for b in bugs if b.half is Half(half)],
            [p for p in projects if p.half is None or p.half is Half(half)])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", metavar="REV", help="also run the linter as committed at REV, side by side")
    parser.add_argument("--only", choices=("bugs", "precision"), help="run one corpus")
    parser.add_argument("--project", action="append", default=[], help="only these PyPI names")
    parser.add_argument("--unjudged", action="store_true", help="list findings not yet judged")
    parser.add_argument("--half", choices=("tune", "test", "all"), default="tune",
                        help="which half of the corpora to score (default: tune; the test half is "
                             "scored once, at the end)")
    args = parser.parse_args(argv)
    try:
        bugs = load_bugs() if args.only != "precision" else []
        projects = load_judged() if args.only != "bugs" else []
    except CorpusError as exc:
        print(f"bench_linter_corpus: {exc}", file=sys.stderr)
        return 2
    if args.project:
        bugs = [b for b in bugs if b.project in args.project]
        projects = [p for p in projects if p.release.name in args.project]
    bugs, projects = in_half(bugs, projects, args.half)
    linters = [working_tree()] + ([at_revision(args.against)] if args.against else [])
    releases = {p.release for p in projects}
    for bug in bugs:
        releases.add(bug.buggy.release)
        if bug.fixed:
            releases.add(bug.fixed.release)
    print(f"linting {len(releases)} releases with {', '.join(linter.label for linter in linters)}",
          file=sys.stderr)
    runs = Runs(linters, releases)
    if bugs:
        bug_summary(linters, bug_table(linters, runs, bugs, args.half))
    if projects:
        precision_table(linters, runs, projects, args.unjudged, args.half)
    return 0


if __name__ == "__main__":
    sys.exit(main())
