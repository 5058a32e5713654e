"""One lint run over a project: select files, analyse, place and filter the findings.

The command line (:mod:`.cli`) is a thin layer over :func:`lint_paths`; the steps here are
the ones every output format and the baseline depend on: paths relative to the project
root, the enclosing function of each finding, ``per-file-ignores``, and findings in
quiet roles (tests, migrations, scripts: :mod:`.roles`) counted and left out.

Inside a project every run analyses the whole project (:class:`ProjectRun`, through the
on-disk index of :mod:`.index`) and reports the files it was given, so ``txnsafety lint
FILE``, flake8 and pre-commit agree with ``txnsafety lint .`` on each file.
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import os
from typing import Any, Callable, Mapping, Optional, Sequence

import pathspec

from .analysis import FileFacts, Prefilter, analyze_file, analyze_project, analyze_source, file_facts
from .selection.files import SourceFile, file_role, select_files
from .report.identity import with_functions
from .project.index import CACHE_DIR, FileResult, IndexStats, ProjectIndex
from .facts.model import Finding
from .project.callers import quiet_functions, quiet_group
from .selection.roles import QUIET, FileRole, QuietGroup
from .selection.settings import Settings, flake8_txn_options
from .selection.sources import FileProblem, noqa_filter, parse_file


@dataclasses.dataclass
class RunResult:
    findings: list[Finding]                       # shown, sorted, paths root-relative
    hidden: dict[QuietGroup, int]                 # left out by role, per group
    errors: list[str]                             # ``path: error: ...`` lines (exit 2)
    warnings: list[str]                           # ``path: warning: ...`` lines
    notes: list[str]                              # ``path: note: ...`` lines (verbose)
    files: int = 0
    below_confidence: int = 0                     # left out under min-confidence
    below_severity: int = 0                       # left out under min-severity


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


def project_scope(paths: Sequence[str], settings: Settings) -> Optional[str]:
    """The project root when ``paths`` lie inside a real project (a configuration file or a
    git work tree marks its root), else None: the given paths are then the whole project,
    as before (a folder outside any project is never walked)."""
    root = os.path.abspath(settings.root)
    marked = settings.config_file is not None or os.path.exists(os.path.join(root, ".git")) \
        or (settings.flake8_file is not None and os.path.dirname(settings.flake8_file) == root
            and bool(flake8_txn_options(settings.flake8_file)))
    if not marked:
        return None
    for path in paths:
        ap = os.path.abspath(path)
        if ap != root and not ap.startswith(root + os.sep):
            return None
    return root


def lint_paths(paths: Sequence[str], settings: Settings, cross_module: bool = True,
               cache: Optional[bool] = None) -> RunResult:
    """One run.  Inside a project (:func:`project_scope`) the whole project is analysed (from
    the index when nothing changed) and the findings of the files selected from ``paths``
    are reported: ``txnsafety lint FILE`` and ``txnsafety lint .`` agree on ``FILE``."""
    selection = select_files(paths, settings)
    result = RunResult([], {}, list(selection.errors), list(selection.warnings), [],
                       len(selection.files))
    root = project_scope(paths, settings) if cross_module else None
    outcomes: dict[str, FileResult] = {}
    if root is not None:
        project = ProjectRun.for_root(root, settings, cache)
        lines = project.messages()
        result.notes.append(lines[0])
        result.warnings.extend(lines[1:])
        alone = []
        for sf in selection.files:
            found = project.result(sf.shown)
            if found is None:
                alone.append(sf)          # not part of the project's selection (excluded)
            else:
                outcomes[sf.shown] = found
        outcomes.update(analyze_files(alone, settings, [], cross_module=False))
    else:
        outcomes = analyze_files(selection.files, settings, paths, cross_module)
    hidden: collections.Counter = collections.Counter()
    for sf in selection.files:
        outcome = outcomes.get(sf.shown)
        if outcome is None:
            continue
        if outcome.error:
            result.errors.append(f"{sf.shown}: error: {outcome.error}")
        if outcome.note:
            result.notes.append(f"{sf.shown}: note: {outcome.note}")
        off = ignored_codes(sf.shown, settings.per_file_ignores)
        for f in outcome.findings:
            if any(f.code.startswith(c) for c in off):
                continue
            group = visible(f, sf.role, settings) or quiet_group(outcome.quiet, f.function,
                                                                 settings.include)
            if group is not None:
                hidden[group] += 1
                continue
            if f.confidence < settings.min_confidence:
                result.below_confidence += 1
                continue
            if f.severity < settings.min_severity:
                result.below_severity += 1
                continue
            result.findings.append(dataclasses.replace(f, path=sf.shown))
    result.findings.sort(key=Finding.sort_key)
    result.hidden = {g: hidden[g] for g in QuietGroup if hidden[g]}
    return result


class ProjectRun:
    """The analysis of the whole project under ``root``, from the index when nothing changed.

    Every entry point reads one file's part of it (:meth:`result`), so flake8 on a file,
    the pre-commit hook on changed files and ``txnsafety lint .`` judge it with the same
    project facts."""

    def __init__(self, root: str, results: dict[str, FileResult], stats: IndexStats):
        self.root = root
        self.results = results
        self.stats = stats

    @classmethod
    def for_root(cls, root: str, settings: Settings, cache: Optional[bool] = None) -> "ProjectRun":
        index = ProjectIndex(root, enabled=settings.cache if cache is None else cache)
        with index.locked():
            index.load()
            files = select_files([root], settings).files
            digests = index.refresh([(sf.shown, sf.path) for sf in files])
            key = index.project_key(digests, settings.analysis)
            results = index.results(key)
            if results is None or set(results) != set(digests):
                index.stats.reused = False
                cfg = settings.analysis
                get = index.facts_source(cfg, lambda _shown, parsed: file_facts(*parsed, cfg))
                results = analyze_files(files, settings, [root], facts_of=lambda sf, src, tree: get(
                    sf.shown, digests.get(sf.shown), (src, tree)))
                index.store(key, results)
            elif index.stats.reread:
                index.save()               # same content, new modification times
        return cls(root, results, index.stats)

    def result(self, shown: str) -> Optional[FileResult]:
        """The file's part, None when the file is not part of the project's selection."""
        return self.results.get(shown)

    def messages(self) -> list[str]:
        s = self.stats
        how = "reused" if s.reused else \
            f"computed (facts of {s.facts_reused} unchanged file(s) from the index)"
        lines = [f"txnsafety: index {CACHE_DIR}: {s.files} file(s), {s.reread} read again, "
                 f"project analysis {how}"]
        return lines + s.problems


def analyze_files(files: Sequence[SourceFile], settings: Settings, roots: Sequence[str],
                  cross_module: bool = True,
                  facts_of: Optional[Callable[[SourceFile, str, Any], FileFacts]] = None
                  ) -> dict[str, FileResult]:
    """Each file's findings (``# noqa`` applied, enclosing functions filled in) or problem,
    by shown path: the files analysed together as one project, or each on its own.
    ``facts_of``: each file's :class:`FileFacts` (the index keeps them by content)."""
    cfg = settings.analysis
    prefilter = Prefilter(cfg)
    out: dict[str, FileResult] = {}
    parsed: list[tuple[SourceFile, str, object]] = []
    for sf in files:
        try:
            got = parse_file(sf.path, cfg)
        except FileProblem as exc:
            out[sf.shown] = FileResult(error=str(exc))
            continue
        if got is None:
            out[sf.shown] = FileResult(note="empty file, nothing to check")
        else:
            parsed.append((sf, got[0], got[1]))
    raw: dict[str, list[Finding]] = {}
    if cross_module:
        try:
            facts = [facts_of(sf, src, tree) for sf, src, tree in parsed] if facts_of else None
            raw = analyze_project([(sf.path, src, tree) for sf, src, tree in parsed], cfg,
                                  [p for p in roots if os.path.exists(p)], prefilter, facts)
        except Exception:  # noqa: BLE001 - one pathological file must not hide the rest
            raw = {}
            cross_module = False
    for sf, src, tree in parsed:
        if not cross_module:
            try:
                raw[sf.path] = analyze_file(sf.path, src, tree, cfg, prefilter,  # type: ignore[arg-type]
                                            noqa=False)
            except FileProblem as exc:
                out[sf.shown] = FileResult(error=str(exc))
                continue
        found = raw.get(sf.path, [])
        if not found:
            out[sf.shown] = FileResult()
            continue
        found = with_functions(found, tree)  # type: ignore[arg-type]
        kept = noqa_filter(found, src)
        out[sf.shown] = FileResult(kept, [f for f in found if f not in kept])
    if cross_module:
        _note_quiet_callers(parsed, out)
    return out


def _note_quiet_callers(parsed: list, out: dict[str, FileResult]) -> None:
    """Record, for the functions holding findings in reported files, the quiet group of
    callers when only quiet code calls them (``project/callers.py``)."""
    if not any(out.get(sf.shown) and out[sf.shown].findings and QUIET.get(sf.role) is None
               for sf, _src, _tree in parsed):
        return
    quiet = quiet_functions([(sf.path, tree) for sf, _src, tree in parsed],
                            {sf.path: sf.role for sf, _src, _tree in parsed})
    for sf, _src, _tree in parsed:
        result = out.get(sf.shown)
        if result is None or not result.findings:
            continue
        for f in result.findings + result.silenced:
            scope = f.function or ""
            while scope:
                group = quiet.get((sf.path, scope))
                if group is not None:
                    result.quiet[scope] = group.value
                scope = scope.rpartition(".")[0]


def shown_at(f: Finding, settings: Settings) -> bool:
    """Whether ``f`` passes ``min-confidence`` and ``min-severity``."""
    return f.confidence >= settings.min_confidence and f.severity >= settings.min_severity


def from_project(project: ProjectRun, path: str, settings: Settings) -> Optional[list[Finding]]:
    """The findings of ``path`` from the project's analysis, filtered as :func:`lint_paths`
    filters them (roles, ``per-file-ignores``, ``min-confidence``); None when the file is not
    part of the project's selection."""
    shown, role = file_role(path, os.path.dirname(os.path.abspath(path)), settings)
    found = project.result(shown)
    if found is None:
        return None
    if QUIET.get(role) is not None and QUIET[role] not in settings.include:
        return []
    off = ignored_codes(shown, settings.per_file_ignores)
    return [f for f in found.findings + found.silenced
            if not any(f.code.startswith(c) for c in off) and shown_at(f, settings)
            and quiet_group(found.quiet, f.function, settings.include) is None]


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
            and shown_at(f, settings)]
