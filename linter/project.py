"""One lint run over a project: select files, analyse, place and filter the findings.

The command line (:mod:`.cli`) is a thin layer over :func:`lint_paths`; the steps here are
the ones every output format and the baseline depend on: paths relative to the project
root, the enclosing function of each finding, ``per-file-ignores``, and findings in
quiet roles (tests, migrations, scripts: :mod:`.roles`) counted and left out.
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import os
from typing import Mapping, Optional, Sequence

import pathspec

from .analysis import Prefilter, analyze_project, analyze_source
from .files import SourceFile, file_role, select_files
from .identity import with_functions
from .model import Finding
from .callers import quiet_functions, quiet_group
from .roles import QUIET, FileRole, QuietGroup
from .settings import Settings
from .sources import FileProblem, analyze_file, noqa_filter, parse_file


@dataclasses.dataclass
class RunResult:
    findings: list[Finding]                       # shown, sorted, paths root-relative
    hidden: dict[QuietGroup, int]                 # left out by role, per group
    errors: list[str]                             # ``path: error: ...`` lines (exit 2)
    warnings: list[str]                           # ``path: warning: ...`` lines
    notes: list[str]                              # ``path: note: ...`` lines (verbose)
    files: int = 0
    below_confidence: int = 0                     # left out under min-confidence


@functools.lru_cache(maxsize=None)
def _spec(pattern: str) -> pathspec.GitIgnoreSpec:
    return pathspec.GitIgnoreSpec.from_lines([pattern])


def ignored_codes(shown: str, table: Mapping[str, frozenset[str]]) -> frozenset[str]:
    """Codes (or prefixes) ``per-file-ignores`` switches off for the file ``shown``.

    Patterns are matched like Ruff's: against the path relative to the project root, and a
    pattern without a ``/`` against the file name at any depth."""
    out: set[str] = set()
    for pattern, codes in table.items():
        if _spec(pattern).match_file(shown.lstrip("/")):
            out |= codes
    return frozenset(out)


def visible(f: Finding, role: FileRole, settings: Settings) -> Optional[QuietGroup]:
    """None when ``f`` is shown, else the quiet group that hides it."""
    group = QUIET.get(role)
    return None if group is None or group in settings.include else group


def _quiet_functions(parsed: list, raw: Mapping[str, list[Finding]],
                     settings: Settings) -> dict[tuple[str, str], QuietGroup]:
    """Functions of reported files that only quiet code calls (``callers.py``); computed
    only when such a file has a finding."""
    if not any(raw.get(sf.path) and visible(raw[sf.path][0], sf.role, settings) is None
               for sf, _src, _tree in parsed):
        return {}
    return quiet_functions([(sf.path, tree) for sf, _src, tree in parsed],
                           {sf.path: sf.role for sf, _src, _tree in parsed},
                           frozenset(settings.include))


def lint_paths(paths: Sequence[str], settings: Settings, cross_module: bool = True) -> RunResult:
    cfg = settings.analysis
    prefilter = Prefilter(cfg)
    selection = select_files(paths, settings)
    result = RunResult([], {}, list(selection.errors), list(selection.warnings), [],
                       len(selection.files))
    parsed: list[tuple[SourceFile, str, object]] = []
    for sf in selection.files:
        try:
            got = parse_file(sf.path, cfg)
        except FileProblem as exc:
            result.errors.append(f"{sf.shown}: error: {exc}")
            continue
        if got is None:
            result.notes.append(f"{sf.shown}: note: empty file, nothing to check")
        else:
            parsed.append((sf, got[0], got[1]))
    raw: dict[str, list[Finding]] = {}
    if cross_module:
        roots = [p for p in paths if os.path.exists(p)]
        try:
            raw = analyze_project([(sf.path, src, tree) for sf, src, tree in parsed], cfg,
                                  roots, prefilter)
        except Exception:  # noqa: BLE001 - one pathological file must not hide the rest
            raw = {}
            cross_module = False
        else:
            sources = {sf.path: src for sf, src, _tree in parsed}
            raw = {path: noqa_filter(found, sources[path]) for path, found in raw.items()}
    if not cross_module:
        for sf, src, tree in parsed:
            try:
                raw[sf.path] = analyze_file(sf.path, src, tree, cfg, prefilter)  # type: ignore[arg-type]
            except FileProblem as exc:
                result.errors.append(f"{sf.shown}: error: {exc}")
    hidden: collections.Counter = collections.Counter()
    quiet = _quiet_functions(parsed, raw, settings) if cross_module else {}
    for sf, _src, tree in parsed:
        found = raw.get(sf.path, [])
        if not found:
            continue
        off = ignored_codes(sf.shown, settings.per_file_ignores)
        for f in with_functions(found, tree):  # type: ignore[arg-type]
            if any(f.code.startswith(c) for c in off):
                continue
            group = visible(f, sf.role, settings) or quiet_group(quiet, sf.path, f.function)
            if group is not None:
                hidden[group] += 1
                continue
            if f.confidence < settings.min_confidence:
                result.below_confidence += 1
                continue
            result.findings.append(dataclasses.replace(f, path=sf.shown))
    result.findings.sort(key=Finding.sort_key)
    result.hidden = {g: hidden[g] for g in QuietGroup if hidden[g]}
    return result


def analyze_one(path: str, source: str, tree: object, settings: Settings,
                prefilter: Optional[Prefilter] = None) -> list[Finding]:
    """Findings of one file as the flake8 plugin reports them (roles and per-file-ignores
    applied, paths untouched): the same decisions as :func:`lint_paths`."""
    shown, role = file_role(path, os.path.dirname(os.path.abspath(path)), settings)
    if QUIET.get(role) is not None and QUIET[role] not in settings.include:
        return []
    off = ignored_codes(shown, settings.per_file_ignores)
    found = analyze_source(source, settings.analysis, path, tree=tree,  # type: ignore[arg-type]
                           prefilter=prefilter)
    return [f for f in found if not any(f.code.startswith(c) for c in off)
            and f.confidence >= settings.min_confidence]
