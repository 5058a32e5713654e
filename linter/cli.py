"""``txnsafety lint PATH...`` (also ``python -m txnsafety_lint``).

Exit status: 0 nothing found, 1 findings (not in the baseline), 2 usage or configuration
error, or a file or folder that could not be read or analysed (the reason is printed,
never a traceback; it wins over 1, since a run that could not see everything is not a
verdict).  The work is in :mod:`.project`; this module parses options and prints.
"""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from .fixing import diff, fix_until_done, fixable_line, fixes_of, plan
from .report.baseline import apply_baseline, write_baseline
from .report.console import not_shown, severity_summary, statistics, use_color
from .runner import RunResult, lint_paths
from .report.formats import FORMATS, sarif, text
from .selection.roles import QuietGroup
from .selection.settings import ConfigError, Settings, apply_mapping, load_settings


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="txnsafety lint",
                                description="Find lost-write (data stomping) bugs in Python code.")
    p.add_argument("paths", nargs="*", default=["."], help="files or directories (default: .)")
    p.add_argument("--format", choices=sorted(FORMATS), default="text")
    p.add_argument("--output", "-o", help="write the report to this file instead of stdout")
    p.add_argument("--baseline", help="ignore findings recorded in this baseline file")
    p.add_argument("--write-baseline", metavar="FILE",
                   help="record the current findings in FILE and exit 0")
    p.add_argument("--config", help="pyproject.toml to read [tool.txnsafety] from "
                                    "(default: the nearest one that has the table)")
    p.add_argument("--enable", action="append", default=[], help="enable opt-in codes, e.g. TXN109")
    p.add_argument("--disable", action="append", default=[], help="do not report these codes")
    p.add_argument("--isolation", help="assumed isolation level (read committed, serializable, ...)")
    p.add_argument("--exclude", action="append", default=None,
                   help="glob of paths to skip, replacing the configured exclude (repeatable)")
    p.add_argument("--extend-exclude", action="append", default=[],
                   help="glob of paths to skip, besides exclude (repeatable)")
    p.add_argument("--force-exclude", action="store_true", default=None,
                   help="apply exclude to paths given on the command line too (pre-commit)")
    p.add_argument("--no-respect-gitignore", action="store_true",
                   help="check files that .gitignore lists")
    for group in QuietGroup:
        p.add_argument(group.option, action="store_true",
                       help=f"report findings in {group.value} too")
    p.add_argument("--min-confidence", choices=("low", "medium", "high"),
                   help="leave out findings below this confidence (default: medium; low adds stale "
                        "whole-row saves whose changes derive nothing from the read)")
    p.add_argument("--min-severity", choices=("low", "medium", "high"),
                   help="leave out findings below this severity (default: medium; low adds races on a "
                        "user's own rows that cost little: a label, a timestamp, a statistic)")
    p.add_argument("--statistics", action="store_true", help="count the findings per code")
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="colour the text output (auto: on a terminal; NO_COLOR/FORCE_COLOR apply)")
    p.add_argument("--no-cross-module", action="store_true",
                   help="analyse each file on its own (no calls followed between modules)")
    p.add_argument("--no-cache", action="store_true",
                   help="do not read or write the project index (.txnsafety_cache at the "
                        "project root); setting: cache = false")
    p.add_argument("--fix", action="store_true", default=None,
                   help="rewrite the code of the findings that have a safe fix (setting: fix = true)")
    p.add_argument("--no-fix", dest="fix", action="store_false", help="do not fix (overrides fix = true)")
    p.add_argument("--unsafe-fixes", action="store_true", default=None,
                   help="with --fix, apply the unsafe fixes too (setting: unsafe-fixes = true)")
    p.add_argument("--no-unsafe-fixes", dest="unsafe_fixes", action="store_false",
                   help="do not apply unsafe fixes (overrides unsafe-fixes = true)")
    p.add_argument("--diff", action="store_true",
                   help="print the unified diff of the fixes --fix would apply, change nothing "
                        "(exit 1 when there is one)")
    p.add_argument("--exit-zero", action="store_true", help="exit 0 even when something is found")
    p.add_argument("--verbose", "-v", action="store_true")
    return p


def _settings(args: argparse.Namespace) -> Settings:
    s = load_settings(args.paths[0] if args.paths else ".", config=args.config)
    overrides: dict = {}
    if args.enable:
        overrides["enable"] = ",".join(args.enable)
    if args.disable:
        overrides["disable"] = ",".join(args.disable)
    if args.isolation:
        overrides["isolation"] = args.isolation
    if args.exclude is not None:
        overrides["exclude"] = ",".join(args.exclude)
    if args.extend_exclude:
        overrides["extend-exclude"] = ",".join(args.extend_exclude)
    if args.force_exclude:
        overrides["force-exclude"] = "true"
    if args.no_respect_gitignore:
        overrides["respect-gitignore"] = "false"
    for group in QuietGroup:
        if getattr(args, group.setting.replace("-", "_")):
            overrides[group.setting] = "true"
    if args.min_confidence:
        overrides["min-confidence"] = args.min_confidence
    if args.min_severity:
        overrides["min-severity"] = args.min_severity
    if args.no_cache:
        overrides["cache"] = "false"
    for key in ("fix", "unsafe_fixes"):
        if getattr(args, key) is not None:
            overrides[key.replace("_", "-")] = str(getattr(args, key)).lower()
    apply_mapping(s, {"txn-" + k: v for k, v in overrides.items()}, None, "command line",
                  from_ini=True)
    return s


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        settings = _settings(args)
    except ConfigError as exc:
        print(f"txnsafety lint: configuration error: {exc}", file=sys.stderr)
        return 2

    run = lint_paths(args.paths, settings, cross_module=not args.no_cross_module)
    for line in run.warnings + run.errors + (run.notes if args.verbose else []):
        print(line, file=sys.stderr)
    findings = run.findings
    if args.write_baseline:
        write_baseline(args.write_baseline, findings)
        print(f"txnsafety lint: wrote {len(findings)} finding(s) to {args.write_baseline}",
              file=sys.stderr)
        return 2 if run.errors else 0
    shown = _baselined(args, settings, findings)
    if shown is None:
        return 2
    if args.diff:
        return _diff(run, shown, settings)
    if settings.fix:
        run, shown = _fix(args, settings, run, shown)
    left_out = not_shown(run.hidden, run.below_confidence, settings.min_confidence,
                         run.below_severity, settings.min_severity)
    _write_report(args, settings, shown, left_out)
    # by severity, on stderr after everything else: stdout stays one finding a line
    sys.stderr.write(severity_summary(shown))
    if args.verbose:
        print(f"txnsafety lint: {run.files} file(s), {len(shown)} finding(s), "
              f"{len(run.errors)} problem(s); project root {settings.root}", file=sys.stderr)
    if run.errors:
        return 2
    return 1 if shown and not args.exit_zero else 0


def _baselined(args: argparse.Namespace, settings: Settings, findings: list) -> Optional[list]:
    """The findings not in ``--baseline`` (all without one); None when it cannot be used."""
    if not args.baseline:
        return findings
    try:
        applied = apply_baseline(args.baseline, findings, settings.root)
    except (OSError, ValueError) as exc:
        print(f"txnsafety lint: cannot use baseline {args.baseline}: {exc}", file=sys.stderr)
        return None
    if applied.note:
        print(f"txnsafety lint: note: {applied.note}", file=sys.stderr)
    return applied.findings


def _diff(run: RunResult, findings: list, settings: Settings) -> int:
    """``--diff``: the fixes as a unified diff on stdout, a count on stderr; nothing written."""
    text_out, count, notes = diff(plan(findings, settings.root, settings.analysis),
                                  settings.unsafe_fixes)
    sys.stdout.write(text_out)
    for line in notes:
        print(line, file=sys.stderr)
    noun = "finding" if count == 1 else "findings"
    print(f"txnsafety lint: would fix {count} {noun}", file=sys.stderr)
    if run.errors:
        return 2
    return 1 if count else 0


def _fix(args: argparse.Namespace, settings: Settings, run: RunResult,
         findings: list) -> tuple[RunResult, Optional[list]]:
    """``--fix``: fix, lint again, until nothing more applies; the last run and what it
    shows (None: the baseline could not be read)."""
    runs = [run]

    def lint() -> list:
        runs.append(lint_paths(args.paths, settings, cross_module=not args.no_cross_module))
        return _baselined(args, settings, runs[-1].findings) or []

    remaining, summary = fix_until_done(findings, lint, settings.root, settings.unsafe_fixes,
                                        settings.analysis)
    for line in summary.problems + summary.notes:
        print(line, file=sys.stderr)
    if summary.applied:
        noun = "finding" if summary.applied == 1 else "findings"
        print(f"txnsafety lint: fixed {summary.applied} {noun} in {len(summary.files)} file(s)",
              file=sys.stderr)
    return runs[-1], remaining


def _write_report(args: argparse.Namespace, settings: Settings, findings: list,
                  left_out: str) -> None:
    """The report to --output or stdout; statistics and the "not shown" line after a text
    report, on stderr after the machine-readable ones (which must stay parseable); the
    fixable count of a text report on stderr.  Fixes are computed for the text marks and
    SARIF only."""
    to_stdout = not args.output
    fixes = fixes_of(plan(findings, settings.root, settings.analysis)) \
        if args.format in ("text", "sarif") and findings else {}
    if args.format == "text":
        fixable = {f for f, fix in fixes.items()
                   if fix.available and fix.applicability.applies(settings.unsafe_fixes)}
        report = text(findings, color=to_stdout and use_color(args.color, sys.stdout),
                      fixable=fixable)
    elif args.format == "sarif":
        report = sarif(findings, fixes)
    else:
        report = FORMATS[args.format](findings)
    extra = (statistics(findings) if args.statistics else "") + left_out
    if args.format == "text":
        report, extra = report + extra, ""
    # like the severity summary, on stderr: stdout stays one finding a line
    extra += fixable_line(fixes, settings.unsafe_fixes) if args.format == "text" else ""
    if args.output:
        with open(args.output, "w", encoding="utf-8") as fh:
            fh.write(report)
    else:
        sys.stdout.write(report)
    sys.stderr.write(extra)
