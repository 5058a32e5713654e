"""The one configuration loader of ``txnsafety lint``, the flake8 plugin and pre-commit.

Both entry points used to read different things (the command ``pyproject.toml`` only,
flake8 its own ``txn-*`` options plus ``pyproject.toml``), so one tree gave different
findings.  Now both call :func:`load_settings`, which reads, in this order:

1. flake8's ``txn-*`` options from the nearest ``setup.cfg`` / ``tox.ini`` / ``.flake8``
   with a ``[flake8]`` section;
2. ``[tool.txnsafety]`` (or ``[tool.txnsafety.lint]``) of the nearest ``pyproject.toml``
   that has one, as Ruff picks the nearest file with ``[tool.ruff]``;

Lists extend, scalars replace: on a conflict ``pyproject.toml`` wins.  Command-line
options come last.  An unknown key or a bad value is a :class:`ConfigError` whose one
line names the file, the section and the key; the callers turn it into exit status 2.

The project root (what reported paths are relative to, and what ``exclude`` and
``per-file-ignores`` patterns are anchored at) is the directory of the configuration file
in use, else the top of the git work tree, else the current directory.
"""
from __future__ import annotations

import configparser
import dataclasses
import difflib
import os
import sys
from typing import Any, Callable, Mapping, Optional

from ..facts.config import LINTER_CODES, Config
from ..facts.model import Confidence, Severity
from .roles import FileRole, QuietGroup, parse_role

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

#: Ruff's default ``exclude`` plus the build and cache folders the linter always skipped.
DEFAULT_EXCLUDE: tuple[str, ...] = (
    ".bzr", ".direnv", ".eggs", ".git", ".git-rewrite", ".hg", ".mypy_cache", ".nox",
    ".pants.d", ".pytest_cache", ".pytype", ".ruff_cache", ".svn", ".tox", ".venv",
    "__pycache__", "__pypackages__", "_build", "buck-out", "build", "dist", "env",
    "node_modules", "venv", ".txnsafety_cache")

FLAKE8_FILES = ("setup.cfg", "tox.ini", ".flake8")


class ConfigError(ValueError):
    """A configuration problem, shown as one line: ``file: [section] problem``."""

    @classmethod
    def at(cls, file: Optional[str], section: str, problem: str) -> "ConfigError":
        where = f"{_shown(file)}: " if file else ""
        return cls(f"{where}[{section}] {problem}" if section else f"{where}{problem}")


@dataclasses.dataclass
class Settings:
    """Everything a lint run needs besides the source: analysis vocabulary and file selection."""

    analysis: Config = dataclasses.field(default_factory=Config)
    root: str = dataclasses.field(default_factory=os.getcwd)
    config_file: Optional[str] = None          # the pyproject.toml in use
    flake8_file: Optional[str] = None          # the flake8 configuration whose txn-* were read
    exclude: list[str] = dataclasses.field(default_factory=lambda: list(DEFAULT_EXCLUDE))
    extend_exclude: list[str] = dataclasses.field(default_factory=list)
    per_file_ignores: dict[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    per_file_roles: dict[str, FileRole] = dataclasses.field(default_factory=dict)
    respect_gitignore: bool = True
    #: keep the project index in ``<root>/.txnsafety_cache`` (index.py); off: compute each run
    cache: bool = True
    force_exclude: bool = False
    include: set[QuietGroup] = dataclasses.field(default_factory=set)
    #: findings below this confidence are counted and left out (model.Confidence)
    min_confidence: Confidence = Confidence.MEDIUM
    #: findings below this severity are counted and left out (model.Severity, rules/severity.py)
    min_severity: Severity = Severity.MEDIUM
    #: apply the safe fixes (``fix = true``, ``--fix``; linter/fix/)
    fix: bool = False
    #: offer and, with ``fix``, apply the unsafe fixes too (``unsafe-fixes = true``)
    unsafe_fixes: bool = False

    def all_excludes(self) -> list[str]:
        return [*self.exclude, *self.extend_exclude]


# ---------------------------------------------------------------- values

def _shown(path: Optional[str]) -> str:
    if not path:
        return ""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def _str_list(value: Any, from_ini: bool) -> list[str]:
    if from_ini and isinstance(value, str):
        return [v.strip() for v in value.replace("\n", ",").split(",") if v.strip()]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("expected a list of strings")
    return [v.strip() for v in value if v.strip()]


def _bool(value: Any, from_ini: bool) -> bool:
    if isinstance(value, bool):
        return value
    if from_ini and str(value).strip().lower() in ("1", "true", "yes", "on", "0", "false", "no",
                                                   "off"):
        return str(value).strip().lower() in ("1", "true", "yes", "on")
    raise ValueError("expected true or false")


def _codes(items: list[str]) -> frozenset[str]:
    out = set()
    for item in items:
        code = item.upper()
        if not any(known.startswith(code) for known in LINTER_CODES) or not code.startswith("TXN"):
            raise ValueError(f"unknown code {item!r} (known: {', '.join(LINTER_CODES)}, or a "
                             f"prefix such as TXN or TXN10)")
        out.add(code)
    return frozenset(out)


def _ignores(value: Any, from_ini: bool) -> dict[str, frozenset[str]]:
    if from_ini and isinstance(value, str):      # flake8 syntax: "glob: CODE, CODE" per line
        table: dict[str, Any] = {}
        for line in value.splitlines():
            if line.strip():
                glob, sep, codes = line.rpartition(":")
                if not sep or not glob.strip():
                    raise ValueError(f"expected 'glob: CODES', got {line.strip()!r}")
                table[glob.strip()] = codes
        value = table
    if not isinstance(value, dict):
        raise ValueError("expected a table of glob = [codes]")
    out = {}
    for glob, codes in value.items():
        items = _str_list(codes, True) if isinstance(codes, str) else _str_list(codes, False)
        out[str(glob)] = _codes(items)
    return out


def _roles(value: Any, from_ini: bool) -> dict[str, FileRole]:
    if from_ini and isinstance(value, str):
        value = dict(line.rsplit(":", 1) for line in value.splitlines() if ":" in line)
    if not isinstance(value, dict):
        raise ValueError("expected a table of glob = role")
    return {str(glob).strip(): parse_role(role) for glob, role in value.items()}


def _set(attr: str, convert: Callable[[Any, bool], Any]) -> Callable[[Settings, Any, bool], None]:
    def apply(s: Settings, value: Any, from_ini: bool) -> None:
        setattr(s, attr, convert(value, from_ini))
    return apply


def _extend(attr: str) -> Callable[[Settings, Any, bool], None]:
    def apply(s: Settings, value: Any, from_ini: bool) -> None:
        getattr(s, attr).extend(_str_list(value, from_ini))
    return apply


def _merge_ignores(s: Settings, value: Any, from_ini: bool) -> None:
    s.per_file_ignores.update(_ignores(value, from_ini))


def _include(group: QuietGroup) -> Callable[[Settings, Any, bool], None]:
    def apply(s: Settings, value: Any, from_ini: bool) -> None:
        (s.include.add if _bool(value, from_ini) else s.include.discard)(group)
    return apply


def _analysis(key: str) -> Callable[[Settings, Any, bool], None]:
    def apply(s: Settings, value: Any, from_ini: bool) -> None:
        current = getattr(s.analysis, key.replace("-", "_"))
        if isinstance(current, set):
            items = _str_list(value, from_ini)
            if key in ("enable", "disable"):
                items = sorted(_codes(items))
            value = items
        elif key == "side-effects-in-any-transaction":
            value = _bool(value, from_ini)
        elif key == "max-bytes":
            if isinstance(value, bool) or not isinstance(value, (int, str)):
                raise ValueError("expected a number of bytes")
            try:
                value = int(value)
            except ValueError:
                raise ValueError("expected a number of bytes") from None
            if value <= 0:
                raise ValueError("expected a positive number of bytes")
        elif not isinstance(value, str):
            raise ValueError("expected a string")
        s.analysis.update({key: value})
    return apply


#: Every key of ``[tool.txnsafety]`` (flake8: the same with a ``txn-`` prefix).
KEYS: dict[str, Callable[[Settings, Any, bool], None]] = {
    **{k.replace("_", "-"): _analysis(k.replace("_", "-")) for k in Config.KEYS},
    "exclude": _set("exclude", lambda v, ini: _str_list(v, ini)),
    "extend-exclude": _extend("extend_exclude"),
    "per-file-ignores": _set("per_file_ignores", _ignores),
    "extend-per-file-ignores": _merge_ignores,
    "per-file-roles": _set("per_file_roles", _roles),
    "respect-gitignore": _set("respect_gitignore", _bool),
    "force-exclude": _set("force_exclude", _bool),
    "cache": _set("cache", _bool),
    **{g.setting: _include(g) for g in QuietGroup},
    "min-confidence": _set("min_confidence", lambda v, ini: Confidence.parse(v)),
    "min-severity": _set("min_severity", lambda v, ini: Severity.parse(v)),
    "fix": _set("fix", _bool),
    "unsafe-fixes": _set("unsafe_fixes", _bool),
}


def apply_mapping(s: Settings, mapping: Mapping[str, Any], file: Optional[str], section: str,
                  from_ini: bool = False) -> None:
    """Apply ``mapping`` to ``s``; ConfigError naming ``file`` and the key on any problem."""
    for raw_key, value in mapping.items():
        key = raw_key.replace("_", "-")
        if from_ini:
            key = key[4:]
        if key not in KEYS:
            shown = raw_key
            choices = [("txn-" + k if from_ini else k) for k in KEYS]
            close = difflib.get_close_matches(raw_key.replace("_", "-"), choices, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError.at(file, section, f"unknown key {shown!r}{hint}")
        try:
            KEYS[key](s, value, from_ini)
        except ValueError as exc:
            raise ConfigError.at(file, section, f"bad value for {raw_key!r}: {exc}") from None


# ---------------------------------------------------------------- files

def _walk_up(start: str):
    path = os.path.abspath(start)
    if not os.path.isdir(path):
        path = os.path.dirname(path)
    while True:
        yield path
        parent = os.path.dirname(path)
        if parent == path:
            return
        path = parent


def _pyproject_table(path: str) -> Optional[tuple[str, dict]]:
    """(section name, table) of ``[tool.txnsafety]`` in ``path``, None when it has none."""
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError.at(path, "", f"invalid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError.at(path, "", f"cannot read: {exc.strerror or exc}") from None
    table = data.get("tool", {}).get("txnsafety")
    if not isinstance(table, dict):
        return None
    if isinstance(table.get("lint"), dict):
        return "tool.txnsafety.lint", table["lint"]
    return "tool.txnsafety", {k: v for k, v in table.items() if k != "lint"}


def find_pyproject(start: str) -> Optional[str]:
    """The nearest ``pyproject.toml`` at or above ``start`` with a ``[tool.txnsafety]`` table."""
    for directory in _walk_up(start):
        candidate = os.path.join(directory, "pyproject.toml")
        if os.path.isfile(candidate) and _pyproject_table(candidate) is not None:
            return candidate
    return None


def find_flake8_config(start: str) -> Optional[str]:
    """The nearest flake8 configuration with a ``[flake8]`` section (flake8's own search)."""
    for directory in _walk_up(start):
        for name in FLAKE8_FILES:
            candidate = os.path.join(directory, name)
            if os.path.isfile(candidate) and _flake8_section(candidate) is not None:
                return candidate
    return None


def _flake8_section(path: str) -> Optional[dict[str, str]]:
    parser = configparser.RawConfigParser()
    try:
        parser.read(path, encoding="utf-8")
    except (configparser.Error, UnicodeDecodeError, OSError):
        return None
    if not parser.has_section("flake8"):
        return None
    return dict(parser.items("flake8"))


def flake8_txn_options(path: str) -> dict[str, str]:
    """The ``txn-*`` options of the ``[flake8]`` section of ``path``."""
    section = _flake8_section(path) or {}
    return {k: v for k, v in section.items() if k.replace("_", "-").startswith("txn-")}


def git_toplevel(start: str) -> Optional[str]:
    """The top of the git work tree holding ``start`` (a ``.git`` directory or file)."""
    for directory in _walk_up(start):
        if os.path.exists(os.path.join(directory, ".git")):
            return directory
    return None


def load_settings(start: str = ".", config: Optional[str] = None,
                  flake8_options: Optional[Mapping[str, Any]] = None) -> Settings:
    """Settings for a run over paths at or below ``start``.

    ``config``: an explicit ``pyproject.toml`` (``--config``) used instead of the search.
    ``flake8_options``: ``txn-*`` values flake8 parsed; when given they replace the ones
    read from the flake8 file (flake8 found and parsed that same file)."""
    s = Settings()
    pyproject = os.path.abspath(config) if config else find_pyproject(start)
    if config and not os.path.isfile(pyproject or ""):
        raise ConfigError.at(config, "", "no such configuration file")
    flake8_file = find_flake8_config(start)
    if flake8_options is not None:
        apply_mapping(s, flake8_options, flake8_file or "flake8 options", "flake8", from_ini=True)
    elif flake8_file:
        apply_mapping(s, flake8_txn_options(flake8_file), flake8_file, "flake8", from_ini=True)
    s.flake8_file = flake8_file
    if pyproject:
        found = _pyproject_table(pyproject)
        if found is not None:
            apply_mapping(s, found[1], pyproject, found[0])
        s.config_file = pyproject
    s.root = project_root(start, pyproject)
    return s


def project_root(start: str = ".", pyproject: Optional[str] = None) -> str:
    """The directory of the configuration in use (``pyproject``, else the one found from
    ``start``, else a flake8 file with ``txn-*`` options), else the git work tree's top,
    else the current directory."""
    pyproject = pyproject or find_pyproject(start)
    if pyproject:
        return os.path.dirname(os.path.abspath(pyproject))
    flake8_file = find_flake8_config(start)
    if flake8_file and flake8_txn_options(flake8_file):
        return os.path.dirname(flake8_file)
    return git_toplevel(start) or os.getcwd()
