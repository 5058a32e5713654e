"""Which files a run checks, as Ruff picks them.

* Directories are walked in sorted order; ``*.py`` files are kept.
* ``exclude`` (default :data:`settings.DEFAULT_EXCLUDE`) and ``extend-exclude`` are
  gitignore-style patterns anchored at the project root: ``build`` skips any file or
  folder of that name, ``app/generated/*.py`` only there.  An excluded folder is not
  entered.
* ``.gitignore`` files (every one from the top of the git work tree down, and
  ``.git/info/exclude``) are respected inside a git work tree unless
  ``respect-gitignore = false``.  The matching is pathspec's implementation of git's rules.
* Paths given explicitly are always checked (pre-commit passes file names), unless
  ``force-exclude`` applies the excludes to them too.
* A FIFO, socket or device is never opened (reading a FIFO blocks forever): it is skipped
  with a warning.  A folder that cannot be listed is an error (exit status 2).
"""
from __future__ import annotations

import dataclasses
import os
import stat
from typing import Iterator, Optional, Sequence

import pathspec

from .roles import FileRole, classify
from .settings import Settings, git_toplevel


@dataclasses.dataclass(frozen=True)
class SourceFile:
    """A file to check: where to open it, how to show it, and its role."""

    path: str        # as opened (the spelling given or found by the walk)
    shown: str       # relative to the project root, ``/`` separated (absolute when outside)
    role: FileRole


@dataclasses.dataclass
class Selection:
    files: list[SourceFile] = dataclasses.field(default_factory=list)
    #: one line each, ``path: error: ...`` (exit status 2)
    errors: list[str] = dataclasses.field(default_factory=list)
    #: one line each, ``path: warning: ...`` (no effect on the exit status)
    warnings: list[str] = dataclasses.field(default_factory=list)


def shown_path(path: str, root: str) -> str:
    """``path`` relative to ``root`` with ``/`` separators; absolute when outside the root."""
    ap = os.path.abspath(path)
    try:
        rel = os.path.relpath(ap, root)
    except ValueError:  # pragma: no cover - another drive on Windows
        rel = ".."
    if rel == os.curdir:
        rel = os.path.basename(ap)
    if rel.startswith(os.pardir):
        return ap.replace(os.sep, "/")
    return rel.replace(os.sep, "/")


class GitIgnore:
    """git's ignore rules for one work tree, read with pathspec from every ``.gitignore``."""

    def __init__(self, top: str):
        self.top = top
        self._specs: dict[str, Optional[pathspec.GitIgnoreSpec]] = {}

    def _spec(self, directory: str) -> Optional[pathspec.GitIgnoreSpec]:
        if directory not in self._specs:
            self._specs[directory] = self._read(directory)
        return self._specs[directory]

    def _read(self, directory: str) -> Optional[pathspec.GitIgnoreSpec]:
        lines: list[str] = []
        sources = [os.path.join(directory, ".gitignore")]
        if directory == self.top:
            sources.insert(0, os.path.join(self.top, ".git", "info", "exclude"))
        for source in sources:
            try:
                with open(source, encoding="utf-8", errors="replace") as fh:
                    lines += fh.read().splitlines()
            except OSError:
                continue
        return pathspec.GitIgnoreSpec.from_lines(lines) if lines else None

    def _decides(self, ap: str, is_dir: bool) -> bool:
        """Whether ``ap`` itself matches (the deepest .gitignore with an opinion decides)."""
        decision = False
        directory = os.path.dirname(ap)
        chain = []
        while True:
            chain.append(directory)
            if directory == self.top or os.path.dirname(directory) == directory:
                break
            directory = os.path.dirname(directory)
        for d in reversed(chain):
            spec = self._spec(d)
            if spec is None:
                continue
            rel = os.path.relpath(ap, d).replace(os.sep, "/") + ("/" if is_dir else "")
            result = spec.check_file(rel)
            if result.include is not None:
                decision = result.include
        return decision

    def ignored(self, path: str, is_dir: bool) -> bool:
        """Whether git ignores ``path`` (also when one of its folders is ignored)."""
        ap = os.path.abspath(path)
        if not (ap + os.sep).startswith(self.top + os.sep) or ap == self.top:
            return False
        parts = os.path.relpath(ap, self.top).split(os.sep)
        current = self.top
        for i, part in enumerate(parts):
            current = os.path.join(current, part)
            last = i == len(parts) - 1
            if self._decides(current, is_dir if last else True):
                return True
        return False


class Selector:
    """Applies one run's exclusion rules (see the module docstring)."""

    def __init__(self, settings: Settings, paths: Sequence[str]):
        self.settings = settings
        self.root = os.path.abspath(settings.root)
        self.excludes = pathspec.GitIgnoreSpec.from_lines(settings.all_excludes())
        self.gitignores: dict[str, Optional[GitIgnore]] = {}

    def _gitignore(self, path: str) -> Optional[GitIgnore]:
        if not self.settings.respect_gitignore:
            return None
        directory = os.path.dirname(os.path.abspath(path))
        if directory not in self.gitignores:
            top = git_toplevel(directory)
            self.gitignores[directory] = GitIgnore(top) if top else None
        return self.gitignores[directory]

    def excluded(self, path: str, is_dir: bool) -> bool:
        ap = os.path.abspath(path)
        name = os.path.basename(ap) + ("/" if is_dir else "")
        if self.excludes.match_file(name):
            return True
        rel = os.path.relpath(ap, self.root)
        if not rel.startswith(os.pardir):
            return bool(self.excludes.match_file(rel.replace(os.sep, "/") + ("/" if is_dir else "")))
        return False

    def ignored(self, path: str, is_dir: bool, walking: bool = False) -> bool:
        """Whether git ignores ``path``; ``walking``: its folders were already checked on
        the way down, so only the path itself is matched."""
        gi = self._gitignore(path)
        if gi is None:
            return False
        ap = os.path.abspath(path)
        if walking:
            return (ap + os.sep).startswith(gi.top + os.sep) and gi._decides(ap, is_dir)
        return gi.ignored(path, is_dir)


def _special(path: str) -> Optional[str]:
    """Why ``path`` is not a regular file or folder (a FIFO, a socket, a device), else None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None          # missing or unreadable: reported when opened
    for test, what in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return what
    return None


def file_role(path: str, base: str, settings: Settings) -> tuple[str, FileRole]:
    """(shown path, role).  Files outside the project root are classified by their path
    below the argument they were found under, never by absolute folders above it."""
    shown = shown_path(path, settings.root)
    if os.path.isabs(shown.replace("/", os.sep)):
        rel = os.path.relpath(os.path.abspath(path), base).replace(os.sep, "/")
    else:
        rel = shown
    return shown, classify(rel, settings.per_file_roles)


def select_files(paths: Sequence[str], settings: Settings) -> Selection:
    """The files of ``paths`` to check, with the errors and warnings met on the way."""
    sel = Selection()
    selector = Selector(settings, paths)
    seen: set[str] = set()

    def add(path: str, base: str) -> None:
        key = os.path.abspath(path)
        if key in seen:
            return
        seen.add(key)
        special = _special(path)
        if special:
            sel.warnings.append(f"{shown_path(path, settings.root)}: warning: skipped: "
                                f"{special}, not a regular file")
            return
        shown, role = file_role(path, base, settings)
        sel.files.append(SourceFile(path, shown, role))

    for path in paths:
        if not os.path.lexists(path):
            sel.errors.append(f"{path}: error: no such file or directory")
            continue
        is_dir = os.path.isdir(path)
        if settings.force_exclude and (selector.excluded(path, is_dir) or
                                       (not is_dir and _ancestor_excluded(path, selector))):
            continue
        if not is_dir:
            add(path, os.path.dirname(os.path.abspath(path)))
            continue
        for found in _walk(path, selector, sel):
            add(found, os.path.abspath(path))
    return sel


def _ancestor_excluded(path: str, selector: Selector) -> bool:
    """Under ``force-exclude``: a file passed by name inside an excluded folder."""
    ap = os.path.abspath(path)
    rel = os.path.relpath(os.path.dirname(ap), selector.root)
    if rel.startswith(os.pardir) or rel == os.curdir:
        return False
    current = selector.root
    for part in rel.split(os.sep):
        current = os.path.join(current, part)
        if selector.excluded(current, True):
            return True
    return False


def _walk(top: str, selector: Selector, sel: Selection) -> Iterator[str]:
    def onerror(exc: OSError) -> None:
        where = exc.filename or top
        sel.errors.append(f"{shown_path(where, selector.root)}: error: cannot read directory: "
                          f"{exc.strerror or exc}")

    for root, dirs, files in os.walk(top, onerror=onerror):
        dirs[:] = sorted(d for d in dirs
                         if not selector.excluded(os.path.join(root, d), True)
                         and not selector.ignored(os.path.join(root, d), True, walking=True))
        for name in sorted(files):
            full = os.path.join(root, name)
            if name.endswith(".py") and not selector.excluded(full, False) \
                    and not selector.ignored(full, False, walking=True):
                yield full
