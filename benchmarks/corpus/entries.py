"""The corpus files as typed data: bugs with their look-alikes, and judged findings."""
from __future__ import annotations

import dataclasses
import enum
import sys
from pathlib import Path
from typing import Optional

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from .halves import Half, half_of
from .releases import Release

HERE = Path(__file__).resolve().parent


class CorpusError(Exception):
    """A corpus file that does not follow README.md; the message names the file and entry."""


@dataclasses.dataclass(frozen=True)
class Place:
    """A function in a release: where a bug is, or its fixed look-alike."""

    release: Release
    path: str
    function: str


@dataclasses.dataclass(frozen=True)
class Bug:
    id: str
    project: str
    buggy: Place
    codes: frozenset[str]
    shape: str
    fix: str
    what: str
    fixed: Optional[Place] = None

    @property
    def half(self) -> Half:
        """Tune or test, from the bug's id (halves.py)."""
        return half_of(self.id)


class Label(str, enum.Enum):
    TP = "TP"
    FP = "FP"
    NOISE = "noise"


@dataclasses.dataclass(frozen=True)
class Judgment:
    path: str
    line: int
    code: str
    label: Label
    reason: str
    #: a TP whose race needs an unlikely coincidence (one user submitting twice within
    #: milliseconds) or whose harm is trivial (a statistic off by one, a timestamp)
    weak: bool = False


@dataclasses.dataclass(frozen=True)
class JudgedProject:
    release: Release
    framework: str
    judgments: dict[tuple[str, int, str], Judgment]
    source: Path
    #: a fresh round ("fresh-2026-11-28"): judged on a linter nobody had tuned to it
    round: Optional[str] = None
    #: the linter commit those judgments were made on, before any change for them
    judged_before_change: Optional[str] = None

    @property
    def half(self) -> Optional[Half]:
        """Tune or test, from the project's name; None for a fresh round's project, which
        is measured apart (as judged before any change) and read for what it teaches."""
        return None if self.round else half_of(self.release.name)


def _load(path: Path) -> dict:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise CorpusError(f"{path}: {exc}") from None


def _need(table: dict, key: str, where: str) -> str:
    value = table.get(key)
    if not isinstance(value, str) or not value:
        raise CorpusError(f"{where}: missing or empty {key!r}")
    return value


def load_bugs(directory: Path = HERE / "bugs") -> list[Bug]:
    bugs: list[Bug] = []
    seen: set[str] = set()
    for path in sorted(directory.glob("*.toml")):
        data = _load(path)
        project = data.get("project", {})
        name = _need(project, "name", f"{path.name} [project]")
        dist = project.get("dist", "sdist")
        for i, entry in enumerate(data.get("bug", [])):
            where = f"{path.name} bug #{i + 1}"
            bug_id = _need(entry, "id", where)
            if bug_id in seen:
                raise CorpusError(f"{where}: duplicate id {bug_id!r}")
            seen.add(bug_id)
            buggy = Place(Release(name, _need(entry, "version", where), dist),
                          _need(entry, "path", where), _need(entry, "function", where))
            fixed = None
            if entry.get("fixed_version"):
                fixed = Place(Release(name, entry["fixed_version"], dist),
                              entry.get("fixed_path", buggy.path), entry.get("fixed_function", buggy.function))
            codes = entry.get("codes")
            if not codes or not all(isinstance(c, str) for c in codes):
                raise CorpusError(f"{where}: 'codes' must be a non-empty list of codes")
            bugs.append(Bug(bug_id, name, buggy, frozenset(codes), entry.get("shape", "other"),
                            entry.get("fix", ""), entry.get("what", ""), fixed))
    return bugs


def _judgment(entry: dict, where: str) -> Judgment:
    try:
        label = Label(entry.get("label"))
    except ValueError:
        raise CorpusError(f"{where}: label must be TP, FP or noise, not {entry.get('label')!r}") from None
    weak = entry.get("weak", False)
    if not isinstance(weak, bool):
        raise CorpusError(f"{where}: weak must be true or false, not {weak!r}")
    if weak and label is not Label.TP:
        raise CorpusError(f"{where}: weak applies to a TP only, not to {label.value}")
    return Judgment(_need(entry, "path", where), int(entry.get("line", 0)), _need(entry, "code", where),
                    label, entry.get("reason", ""), weak)


def _round(project: dict, where: str) -> tuple[Optional[str], Optional[str]]:
    """(round, judged_before_change): both or neither, each a non-empty string."""
    if "round" not in project and "judged_before_change" not in project:
        return None, None
    return _need(project, "round", where), _need(project, "judged_before_change", where)


def load_judged(directory: Path = HERE / "precision") -> list[JudgedProject]:
    projects = []
    for path in sorted(directory.glob("*.toml")):
        data = _load(path)
        project = data.get("project", {})
        where = f"{path.name} [project]"
        release = Release(_need(project, "name", where), _need(project, "version", where),
                          project.get("dist", "sdist"))
        judgments: dict[tuple[str, int, str], Judgment] = {}
        for i, entry in enumerate(data.get("finding", [])):
            j = _judgment(entry, f"{path.name} finding #{i + 1}")
            judgments[(j.path, j.line, j.code)] = j
        fresh_round, judged_at = _round(project, where)
        projects.append(JudgedProject(release, project.get("framework", ""), judgments, path,
                                      fresh_round, judged_at))
    return projects
