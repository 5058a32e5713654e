"""flake8 entry point ``TXN`` (declared in setup.cfg as ``txnsafety_lint.flake8_plugin:Plugin``).

flake8 hands us its ``ast`` tree and the file's lines; the analysis only runs
libcst on the functions the cheap ``ast``/text prefilter keeps.  ``# noqa`` is
applied by flake8 itself.

Inside a project (a configuration file or a git work tree marks its root) the file is judged
with the whole project's analysis, read from the project index (:mod:`.index`) or computed
once per process, so flake8 reports what ``txnsafety lint .`` reports for it.

The configuration comes from the same loader as ``txnsafety lint``
(:func:`settings.load_settings`): ``[tool.txnsafety]`` over flake8's ``txn-*`` options,
file roles (tests, migrations... are quiet) and ``per-file-ignores`` of
``[tool.txnsafety]``.  Which files are checked is flake8's business (its ``exclude``).
A bad configuration stops flake8 with one line on stderr and exit status 2: findings
judged under defaults the user did not ask for would be worse than none.
"""
from __future__ import annotations

import ast
import sys
from typing import Any, Iterator, Optional

from txnsafety import __version__

# flake8 loads every installed plugin; txnsafety installed without its `lint` extra
# (libcst, pathspec) must not crash flake8: the plugin says once what to install and
# checks nothing.
try:
    from .analysis import Prefilter
    from .project.index import IndexStats
    from .runner import ProjectRun, analyze_one, from_project, project_scope
    from .selection.settings import (ConfigError, Settings, apply_mapping, find_flake8_config,
                                     flake8_txn_options, load_settings)
    MISSING: Optional[str] = None
except ImportError as _exc:  # ModuleNotFoundError of a lint dependency
    MISSING = _exc.name or str(_exc)

INSTALL_HINT = "pip install 'txnsafety[lint]'"

_LIST_OPTIONS = ("gets", "puts", "locks", "transactions", "retrying-transactions", "side-effects",
                 "versioned-models", "enable", "disable", "frameworks")


class Plugin:
    name = "txnsafety"
    version = __version__

    _settings: Optional[Settings] = None
    _prefilter: Optional[Prefilter] = None
    #: the project's analysis, made (or read from the index) by the first file of the run
    _project: Optional["ProjectRun"] = None

    def __init__(self, tree: ast.AST, filename: str = "(none)", lines: Optional[list] = None):
        self.tree = tree
        self.filename = filename
        self.lines = lines

    @classmethod
    def add_options(cls, manager: Any) -> None:
        for opt in _LIST_OPTIONS:
            manager.add_option(f"--txn-{opt}", default="", parse_from_config=True,
                               comma_separated_list=True,
                               help=f"txnsafety: extra {opt.replace('-', ' ')} (comma separated)")
        manager.add_option("--txn-isolation", default="", parse_from_config=True,
                           help="txnsafety: assumed isolation level (read committed, repeatable read, "
                                "mysql repeatable read, serializable)")
        manager.add_option("--txn-side-effects-in-any-transaction", default=False,
                           action="store_true", parse_from_config=True,
                           help="txnsafety: report side effects in any transaction (TXN107)")
        manager.add_option("--txn-cache", default="", parse_from_config=True,
                           help="txnsafety: false to neither read nor write the project index "
                                "(.txnsafety_cache at the project root)")
        manager.add_option("--txn-include", default="", parse_from_config=False,
                           comma_separated_list=True,
                           help="txnsafety: report findings in these quiet groups too "
                                "(tests, migrations, scripts, commands)")

    @classmethod
    def parse_options(cls, options: Any) -> None:
        if MISSING is not None:
            sys.stderr.write(f"txnsafety: the TXN checks need the lint extra ({MISSING} is missing): "
                             f"{INSTALL_HINT}\n")
            return
        start = (getattr(options, "filenames", None) or ["."])[0]
        try:
            cls._settings = _load(options, start)
        except ConfigError as exc:
            sys.stderr.write(f"txnsafety: configuration error: {exc}\n")
            raise SystemExit(2) from None
        cls._prefilter = Prefilter(cls._settings.analysis)
        cls._project = None

    def run(self) -> Iterator[tuple[int, int, str, type]]:
        if MISSING is not None:
            return
        settings = type(self)._settings
        if settings is None:
            settings = type(self)._settings = Settings()
            type(self)._prefilter = Prefilter(settings.analysis)
        cfg = settings.analysis
        if self.lines is None:
            try:
                with open(self.filename, encoding="utf-8") as fh:
                    self.lines = fh.readlines()
            except (OSError, UnicodeDecodeError):
                return
        source = "".join(self.lines)
        if len(source) > cfg.max_bytes:
            return
        project = self._project_run(settings)
        findings = from_project(project, self.filename, settings) if project is not None else None
        if findings is None:           # not in a project, or not in its selection: on its own
            try:
                findings = analyze_one(self.filename, source, self.tree, settings,
                                       type(self)._prefilter)
            except (SyntaxError, RecursionError, ValueError, MemoryError):
                return
        for f in findings:
            yield f.line, f.col, f.message, type(self)

    def _project_run(self, settings: "Settings") -> Optional["ProjectRun"]:
        """The project's analysis when this file lies in a project (made once per process;
        a parallel flake8 worker reads what the first one wrote to the index)."""
        if self.filename in ("-", "stdin", "(none)"):
            return None
        root = project_scope([self.filename], settings)
        if root is None:
            return None
        cls = type(self)
        if cls._project is None or cls._project.root != root:
            try:
                cls._project = ProjectRun.for_root(root, settings)
            except Exception as exc:  # noqa: BLE001 - flake8 must go on, file by file
                sys.stderr.write(f"txnsafety: the project under {root} could not be analysed "
                                 f"({exc.__class__.__name__}: {exc}); checking files one by one\n")
                cls._project = ProjectRun(root, {}, IndexStats())
            for line in cls._project.stats.problems:
                sys.stderr.write(line + "\n")
        return cls._project


def _cli_overrides(options: Any, from_file: dict[str, str]) -> dict[str, Any]:
    """The ``txn-*`` values flake8 parsed that its configuration file did not give: the
    ones from flake8's command line, applied last as ``txnsafety lint``'s options are."""
    mapping: dict[str, Any] = {}
    for opt in _LIST_OPTIONS:
        value = getattr(options, "txn_" + opt.replace("-", "_"), None)
        if value:
            mapping["txn-" + opt] = ",".join(value)
    cache = getattr(options, "txn_cache", "")
    if cache:
        mapping["txn-cache"] = cache
    iso = getattr(options, "txn_isolation", "")
    if iso:
        mapping["txn-isolation"] = iso
    if getattr(options, "txn_side_effects_in_any_transaction", False):
        mapping["txn-side-effects-in-any-transaction"] = "true"
    for group in getattr(options, "txn_include", None) or ():
        mapping[f"txn-include-{group.strip()}"] = "true"
    # an explicit --select/--extend-select of an opt-in code enables it
    for attr in ("select", "extend_select", "enable_extensions"):
        for code in getattr(options, attr, None) or ():
            if str(code).upper() == "TXN109":
                mapping["txn-enable"] = ",".join(filter(None, [mapping.get("txn-enable"), "TXN109"]))
    normal = {k.replace("_", "-"): v for k, v in from_file.items()}
    return {k: v for k, v in mapping.items()
            if _normal_value(normal.get(k)) != _normal_value(v)}


def _normal_value(value: Any) -> Any:
    if value is None:
        return None
    return tuple(sorted(v.strip().lower() for v in str(value).replace("\n", ",").split(",")
                        if v.strip()))


def _load(options: Any, start: str) -> Settings:
    """One loader for flake8 and the command: files first, flake8's command line last."""
    settings = load_settings(start)
    flake8_file = find_flake8_config(start)
    from_file = flake8_txn_options(flake8_file) if flake8_file else {}
    apply_mapping(settings, _cli_overrides(options, from_file), None, "flake8 command line",
                  from_ini=True)
    return settings
