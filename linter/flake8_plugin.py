"""flake8 entry point ``TXN`` (declared in setup.cfg as ``txnsafety_lint.flake8_plugin:Plugin``).

flake8 hands us its ``ast`` tree and the file's lines; the analysis only runs
libcst on the functions the cheap ``ast``/text prefilter keeps.  ``# noqa`` is
applied by flake8 itself.
"""
from __future__ import annotations

import ast
import os
import sys
from typing import Any, Iterator, Optional

from .analysis import Prefilter, analyze_source
from .config import Config, config_from, find_pyproject

try:  # pragma: no cover - version is informational
    from importlib.metadata import version as _version
    __version__ = _version("txnsafety")
except Exception:  # pragma: no cover
    __version__ = "0.1.0"

_LIST_OPTIONS = ("gets", "puts", "locks", "transactions", "retrying-transactions", "side-effects",
                 "versioned-models", "enable", "disable", "frameworks")


class Plugin:
    name = "txnsafety"
    version = __version__

    _config: Optional[Config] = None
    _prefilter: Optional[Prefilter] = None

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

    @classmethod
    def parse_options(cls, options: Any) -> None:
        mapping: dict[str, Any] = {}
        for opt in _LIST_OPTIONS:
            value = getattr(options, "txn_" + opt.replace("-", "_"), None)
            if value:
                mapping[opt] = value
        iso = getattr(options, "txn_isolation", "")
        if iso:
            mapping["isolation"] = iso
        if getattr(options, "txn_side_effects_in_any_transaction", False):
            mapping["side-effects-in-any-transaction"] = True
        # an explicit --select/--extend-select of an opt-in code enables it
        for attr in ("select", "extend_select", "enable_extensions"):
            for code in getattr(options, attr, None) or ():
                if str(code).upper() == "TXN109":
                    mapping.setdefault("enable", []).append("TXN109")
        try:
            cfg = config_from(None, find_pyproject(os.getcwd()))
        except Exception as exc:  # noqa: BLE001 - a bad pyproject must not crash flake8
            sys.stderr.write(f"txnsafety: ignoring [tool.txnsafety] in pyproject.toml: {exc}\n")
            cfg = Config()
        try:
            cfg.update(mapping)
        except ValueError as exc:
            sys.stderr.write(f"txnsafety: bad flake8 option: {exc}\n")
        cls._config = cfg
        cls._prefilter = Prefilter(cfg)

    def run(self) -> Iterator[tuple[int, int, str, type]]:
        cfg = type(self)._config
        if cfg is None:
            cfg = type(self)._config = Config()
            type(self)._prefilter = Prefilter(cfg)
        if self.lines is None:
            try:
                with open(self.filename, encoding="utf-8") as fh:
                    self.lines = fh.readlines()
            except (OSError, UnicodeDecodeError):
                return
        source = "".join(self.lines)
        if len(source) > cfg.max_bytes:
            return
        try:
            findings = analyze_source(source, cfg, self.filename, tree=self.tree,
                                      prefilter=type(self)._prefilter)
        except (SyntaxError, RecursionError, ValueError, MemoryError):
            return
        for f in findings:
            yield f.line, f.col, f.message, type(self)
