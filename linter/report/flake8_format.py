"""flake8 report formatters: SARIF 2.1.0 and GitHub workflow annotations.

flake8 plugins cannot add output formats except through the ``flake8.report`` entry
point group; with these registered (see docs/linter.md) ``flake8 --format=txnsafety-sarif``
writes one SARIF log for every code flake8 reports (TXN codes carry full rule metadata),
and ``--format=txnsafety-github`` prints ``::error`` annotations.
"""
from __future__ import annotations

import ast
import dataclasses
import json
from typing import Any, Optional

from flake8.formatting.base import BaseFormatter

from .identity import enclosing_function
from ..facts.model import Finding
from .formats import _escape_gh, sarif

# flake8 imports every installed plugin at start: .files and .settings need the `lint`
# extra (pathspec), so they are imported when the SARIF log is written, not here.


class SarifFormatter(BaseFormatter):
    def after_init(self) -> None:
        self._findings: list[tuple[Finding, str]] = []

    def format(self, error: Any) -> str | None:  # not used: handle() collects
        return None

    def handle(self, error: Any) -> None:
        self._findings.append((Finding(error.line_number, max(error.column_number - 1, 0),
                                       error.code, f"{error.code} {error.text}",
                                       error.filename), error.code))

    def show_statistics(self, statistics: Any) -> None:
        pass

    def show_benchmarks(self, benchmarks: Any) -> None:
        pass

    def stop(self) -> None:
        from txnsafety.codes import CODES
        try:
            from ..selection.files import shown_path
            from ..selection.settings import ConfigError, project_root
        except ImportError as exc:
            raise SystemExit(f"txnsafety: the SARIF format needs the lint extra ({exc.name} is missing): "
                             f"pip install 'txnsafety[lint]'") from None
        try:
            root = project_root(".")
        except ConfigError:  # pragma: no cover - the plugin already stopped flake8
            root = "."
        trees: dict[str, Optional[ast.AST]] = {}
        txn = [_placed(f, root, trees, shown_path) for f, code in self._findings if code in CODES]
        other = [dataclasses.replace(f, path=shown_path(f.path, root))
                 for f, code in self._findings if code not in CODES]
        doc = json.loads(sarif(txn))
        run = doc["runs"][0]
        rules = run["tool"]["driver"]["rules"]
        index = {r["id"]: i for i, r in enumerate(rules)}
        for f in other:
            if f.code not in index:
                index[f.code] = len(rules)
                rules.append({"id": f.code, "shortDescription": {"text": f.code}})
            run["results"].append({
                "ruleId": f.code, "ruleIndex": index[f.code], "level": "warning",
                "message": {"text": f.message},
                "locations": [{"physicalLocation": {
                    "artifactLocation": {"uri": _rel(f.path),
                                         "uriBaseId": "%SRCROOT%"},
                    "region": {"startLine": max(f.line, 1), "startColumn": f.col + 1}}}],
            })
        run["tool"]["driver"]["name"] = "flake8"
        text = json.dumps(doc, indent=2)
        if self.output_fd is not None:
            self.output_fd.write(text + "\n")
            self.output_fd.close()
            self.output_fd = None
        else:
            print(text)


class GithubFormatter(BaseFormatter):
    def format(self, error: Any) -> str | None:
        return (f"::error file={_escape_gh(error.filename, True)},line={error.line_number},"
                f"col={error.column_number},title={_escape_gh(error.code, True)}::"
                f"{_escape_gh(error.code + ' ' + error.text)}")


def _placed(f: Finding, root: str, trees: dict[str, Optional[ast.AST]], shown_path: Any) -> Finding:
    """``f`` with its path relative to the project root and its enclosing function, as
    ``txnsafety lint`` reports it (so both give the same SARIF fingerprints)."""
    if f.path not in trees:
        try:
            with open(f.path, "rb") as fh:
                trees[f.path] = ast.parse(fh.read())
        except (OSError, SyntaxError, ValueError, RecursionError):
            trees[f.path] = None
    tree = trees[f.path]
    return dataclasses.replace(f, path=shown_path(f.path, root),
                               function=enclosing_function(tree, f.line) if tree else None)


def _rel(path: str) -> str:
    path = path.replace("\\", "/")
    while path.startswith("./"):
        path = path[2:]
    return path
