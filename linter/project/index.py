"""The on-disk project index: what one whole-project analysis found, reused by every entry point.

Why: ``txnsafety lint .`` judges a function with facts from the whole project (a loader in
another module, a transaction wrapper declared elsewhere, unique keys in ``models.py``);
flake8 and pre-commit hand the linter one file, or a few.  To report the same findings for a
file whichever way it is checked, every per-file run analyses the *project* and keeps that
file's part.  This index makes that cheap, as mypy's cache does for types:

* it lives at ``<project root>/.txnsafety_cache/`` (the root ``settings.py`` finds: the
  folder of the configuration file, else the git work tree's top), with a ``.gitignore``
  of ``*`` and a ``CACHEDIR.TAG`` inside, and is safe to delete at any time;
* each file of the project has an entry keyed by its content (BLAKE2b of the bytes); a file
  whose size and modification time have not changed is not read again (files changed within
  two seconds of the last write are re-hashed, as git does for "racy" entries);
* the project's result (each file's findings, or why it could not be analysed) is stored
  under one key: the linter's own source hash, the analysis settings, and the (path, content
  hash) of every file.  Any change to one of them re-runs the analysis of the project once;
  the runs after it (the other files flake8 checks, the next pre-commit batch) reuse it;
* writes go to a temporary file renamed over the index (atomic); concurrent runs take an
  advisory lock so one computes while the others wait and then reuse its result.  A corrupt,
  unreadable or unwritable index is never an error: the run computes without it and says why
  in one line (``--verbose`` in ``txnsafety lint``).
"""
from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import hashlib
import json
import os
import tempfile
import typing
from typing import Any, Callable, Iterator, Optional, Sequence

from ..facts.wrappers import FileFacts
from ..facts.config import Config
from ..facts.model import Finding

CACHE_DIR = ".txnsafety_cache"
INDEX_FILE = "index.json"
FORMAT = 1
#: a file modified this close to the index's last write may have changed unseen (same mtime)
RACY_NS = 2_000_000_000

_GITIGNORE = "# Created by txnsafety lint; safe to delete.\n*\n"
_CACHEDIR_TAG = ("Signature: 8a477f597d28d172789f06886806bc55\n"
                 "# This file is a cache directory tag created by txnsafety lint.\n")


@dataclasses.dataclass
class FileResult:
    """One file's part of a project analysis: its findings (``# noqa`` applied, enclosing
    functions filled in, paths not yet placed), or why it could not be analysed."""

    findings: list[Finding] = dataclasses.field(default_factory=list)
    #: findings ``# noqa`` silences: flake8 applies noqa itself (``--disable-noqa``)
    silenced: list[Finding] = dataclasses.field(default_factory=list)
    error: Optional[str] = None      # "cannot parse: ..." (exit status 2 when shown)
    note: Optional[str] = None       # "empty file, nothing to check"
    #: functions (qualified names) that only quiet code calls -> that code's group (callers.py)
    quiet: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class IndexStats:
    """What a refresh did, for ``--verbose`` and the benchmark."""

    files: int = 0
    reread: int = 0                  # files read and hashed again (new or changed)
    reused: bool = False             # the stored project result was used
    facts_reused: int = 0            # files whose FileFacts came from the index
    #: why the index could not be read or written (one line each)
    problems: list[str] = dataclasses.field(default_factory=list)


#: the linter package's root (this module is in its ``project`` folder)
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fingerprinted_sources() -> list[str]:
    """Every file the findings depend on: the whole linter package (its facts, flow and rules,
    not only this folder) and the shared codes."""
    from txnsafety import codes
    sources = [codes.__file__]
    for directory, dirs, names in os.walk(_PACKAGE):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        sources += [os.path.join(directory, n) for n in sorted(names) if n.endswith(".py")]
    return sources


@functools.lru_cache(maxsize=None)
def linter_fingerprint() -> str:
    """Hash of the linter's own source and the shared codes: a new linter, a new index."""
    import txnsafety
    h = hashlib.blake2b(digest_size=16)
    h.update(getattr(txnsafety, "__version__", "").encode())
    for path in fingerprinted_sources():
        h.update(os.path.relpath(path, _PACKAGE).encode())
        with open(path, "rb") as fh:
            h.update(fh.read())
    return h.hexdigest()


def config_fingerprint(cfg: Config) -> str:
    """The analysis settings as stable text (sets sorted): what the findings depend on besides
    the files (roles, ``per-file-ignores`` and ``min-confidence`` are applied after)."""
    def plain(value: Any) -> Any:
        if isinstance(value, (set, frozenset)):
            return sorted(map(repr, value))
        if isinstance(value, dict):
            return sorted((repr(k), repr(v)) for k, v in value.items())
        return repr(value)
    return json.dumps({f.name: plain(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)},
                      sort_keys=True)


def _digest(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.blake2b(fh.read(), digest_size=16).hexdigest()


@functools.lru_cache(maxsize=None)
def _enum_fields() -> dict[str, type]:
    hints = typing.get_type_hints(Finding)
    return {name: hint for name, hint in hints.items()
            if isinstance(hint, type) and issubclass(hint, enum.Enum)}


def _finding_out(f: Finding) -> dict[str, Any]:
    out = {}
    for field in dataclasses.fields(f):
        value = getattr(f, field.name)
        out[field.name] = value.name if isinstance(value, enum.Enum) else value
    return out


def _finding_in(data: dict[str, Any]) -> Finding:
    enums = _enum_fields()
    return Finding(**{k: (enums[k][v] if k in enums else v) for k, v in data.items()})


def _facts_out(f: FileFacts) -> list:
    return [sorted(f.transactions), sorted(f.locks),
            [[model, [sorted(key) for key in keys]] for model, keys in f.unique_keys],
            sorted(f.managers), [[model, sorted(names)] for model, names in f.relations],
            [[cls, list(names)] for cls, names in f.bases],
            [[name, sorted(opened)] for name, opened in f.openers], sorted(f.bound)]


def _facts_in(data: list) -> FileFacts:
    txns, locks, keys, managers, related, bases, opened, bound = data
    return FileFacts(frozenset(map(str, txns)), frozenset(map(str, locks)),
                     tuple((str(model), tuple(frozenset(map(str, key)) for key in found))
                           for model, found in keys),
                     frozenset(map(str, managers)),
                     tuple((str(model), frozenset(map(str, names))) for model, names in related),
                     tuple((str(cls), tuple(map(str, names))) for cls, names in bases),
                     tuple((str(name), frozenset(map(str, names))) for name, names in opened),
                     frozenset(map(str, bound)))


class ProjectIndex:
    """The index of one project root.  ``enabled=False`` keeps everything in memory."""

    def __init__(self, root: str, enabled: bool = True):
        self.root = os.path.abspath(root)
        self.directory = os.path.join(self.root, CACHE_DIR)
        self.enabled = enabled
        self.stats = IndexStats()
        self._files: dict[str, list] = {}            # shown -> [size, mtime_ns, digest]
        self._key: Optional[str] = None
        self._results: dict[str, FileResult] = {}
        self._written_ns = 0
        #: shown -> (content hash, FileFacts), valid under the analysis settings ``_facts_config``
        self._facts: dict[str, tuple[str, FileFacts]] = {}
        self._facts_config = ""

    # ------------------------------------------------------------ reading

    def load(self) -> None:
        """Read the index; a missing one is empty, a broken one is empty with a note."""
        if not self.enabled:
            return
        path = os.path.join(self.directory, INDEX_FILE)
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            self._problem(f"cannot read {self._shown(path)} ({_reason(exc)}); rebuilding it")
            return
        try:
            if data.get("format") != FORMAT or data.get("linter") != linter_fingerprint():
                return                          # another linter's index: rebuilt, not a problem
            files = {str(k): [int(v[0]), int(v[1]), str(v[2])] for k, v in data["files"].items()}
            project = data.get("project") or {}
            results = {str(k): FileResult([_finding_in(f) for f in v.get("findings", [])],
                                          [_finding_in(f) for f in v.get("silenced", [])],
                                          v.get("error"), v.get("note"),
                                          {str(q): str(g) for q, g in (v.get("quiet") or {}).items()})
                       for k, v in (project.get("results") or {}).items()}
            key = project.get("key")
            written = int(data.get("written_ns", 0))
            facts = data.get("facts") or {}
            facts_config = str(facts.get("config", ""))
            per_file = {str(k): (str(v[0]), _facts_in(v[1]))
                        for k, v in (facts.get("files") or {}).items()}
        except (AttributeError, KeyError, IndexError, TypeError, ValueError) as exc:
            self._problem(f"{self._shown(path)} is corrupt ({_reason(exc)}); rebuilding it")
            return
        self._files, self._results, self._key, self._written_ns = files, results, key, written
        self._facts, self._facts_config = per_file, facts_config

    def refresh(self, files: Sequence[tuple[str, str]]) -> dict[str, Optional[str]]:
        """Content hashes of ``files`` ((shown, path) pairs), re-reading only those whose size
        or modification time changed (None for a file that cannot be read: its analysis
        says why)."""
        out: dict[str, Optional[str]] = {}
        fresh: dict[str, list] = {}
        for shown, path in files:
            try:
                st = os.stat(path)
            except OSError:
                out[shown] = None
                continue
            entry = self._files.get(shown)
            if entry is not None and entry[0] == st.st_size and entry[1] == st.st_mtime_ns \
                    and st.st_mtime_ns < self._written_ns - RACY_NS:
                out[shown] = entry[2]
                fresh[shown] = entry
                continue
            try:
                digest = _digest(path)
            except OSError:
                out[shown] = None
                continue
            self.stats.reread += 1
            out[shown] = digest
            fresh[shown] = [st.st_size, st.st_mtime_ns, digest]
        self._files = fresh
        self.stats.files = len(out)
        return out

    @staticmethod
    def project_key(digests: dict[str, Optional[str]], cfg: Config, extra: str = "") -> str:
        h = hashlib.blake2b(digest_size=16)
        h.update(linter_fingerprint().encode())
        h.update(config_fingerprint(cfg).encode())
        h.update(extra.encode())
        for shown in sorted(digests):
            h.update(f"\0{shown}\0{digests[shown]}".encode())
        return h.hexdigest()

    def results(self, key: str) -> Optional[dict[str, FileResult]]:
        """The stored project result under ``key``, or None."""
        if self.enabled and key == self._key:
            self.stats.reused = True
            return self._results
        return None

    def facts_source(self, cfg: Config, compute: Callable[[str, Any], FileFacts]
                     ) -> Callable[[str, Optional[str], Any], FileFacts]:
        """A function (shown, content hash, what ``compute`` needs) -> the file's
        :class:`FileFacts`: from the index when the content and the settings are the same,
        else ``compute(shown, arg)``, remembered for the next save."""
        config = config_fingerprint(cfg)
        if config != self._facts_config:
            self._facts, self._facts_config = {}, config
        old, fresh = self._facts, {}
        self._facts = fresh

        def get(shown: str, digest: Optional[str], arg: Any) -> FileFacts:
            known = old.get(shown)
            if digest is not None and known is not None and known[0] == digest:
                self.stats.facts_reused += 1
                facts = known[1]
            else:
                facts = compute(shown, arg)
            if digest is not None:
                fresh[shown] = (digest, facts)
            return facts
        return get

    # ------------------------------------------------------------ writing

    def store(self, key: str, results: dict[str, FileResult]) -> None:
        self._key, self._results = key, results
        self.save()

    def save(self) -> None:
        """Write the index atomically (a temporary file renamed over it)."""
        if not self.enabled:
            return
        data = {"format": FORMAT, "linter": linter_fingerprint(), "written_ns": 0,
                "files": self._files,
                "project": {"key": self._key, "results": {
                    shown: {"findings": [_finding_out(f) for f in r.findings],
                            "silenced": [_finding_out(f) for f in r.silenced],
                            "error": r.error, "note": r.note, "quiet": r.quiet}
                    for shown, r in self._results.items()}},
                "facts": {"config": self._facts_config, "files": {
                    shown: [digest, _facts_out(f)] for shown, (digest, f) in self._facts.items()}}}
        try:
            self._make_directory()
            fd, tmp = tempfile.mkstemp(prefix=".index-", suffix=".tmp", dir=self.directory)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    data["written_ns"] = os.fstat(fh.fileno()).st_mtime_ns
                    json.dump(data, fh, separators=(",", ":"))
                os.replace(tmp, os.path.join(self.directory, INDEX_FILE))
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError as exc:
            self._problem(f"cannot write {self._shown(self.directory)} ({_reason(exc)}); "
                          f"the next run analyses the project again")

    def _make_directory(self) -> None:
        if os.path.isdir(self.directory):
            return
        os.makedirs(self.directory, exist_ok=True)
        for name, text in ((".gitignore", _GITIGNORE), ("CACHEDIR.TAG", _CACHEDIR_TAG)):
            with open(os.path.join(self.directory, name), "w", encoding="utf-8") as fh:
                fh.write(text)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the index's advisory lock (POSIX ``flock``) while refreshing and computing, so
        parallel runs (pre-commit batches, ``flake8 -j``) compute the project once.  Without a
        lock (Windows, a read-only project) runs still work, each computing for itself."""
        if not self.enabled:
            yield
            return
        try:
            import fcntl
            self._make_directory()
            fh = open(os.path.join(self.directory, "lock"), "a+b")
        except (ImportError, OSError):
            yield
            return
        try:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            except OSError:
                pass
            yield
        finally:
            fh.close()                       # closing releases the lock

    # ------------------------------------------------------------ messages

    def _problem(self, text: str) -> None:
        line = f"txnsafety: index: {text}"
        if line not in self.stats.problems:
            self.stats.problems.append(line)

    def _shown(self, path: str) -> str:
        return os.path.relpath(path, self.root).replace(os.sep, "/")


def _reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or f"{exc.__class__.__name__}: {exc}"
