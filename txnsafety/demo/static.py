"""Step 1: what the linter finds in the lab's handlers, attributed to the handler it is in."""
from __future__ import annotations

import ast
import json
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Iterable


@dataclass(frozen=True)
class StaticFinding:
    path: str
    line: int
    column: int
    code: str
    message: str
    function: str   # the top-level function the finding is in ("" at module level)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def codes_in(findings: Iterable[StaticFinding], function: str) -> list[str]:
    """The codes found in one handler, sorted (a variant's "static findings")."""
    return sorted(f.code for f in findings if f.function == function)


def _functions(path: str) -> list[tuple[int, int, str]]:
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), path)
    return [(node.lineno, node.end_lineno or node.lineno, node.name) for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _resolve(shown: str, directory: str) -> str:
    """The file under ``directory`` that a reported path (relative to the project root,
    which may lie above ``directory``) names."""
    if os.path.isabs(shown):
        return shown
    parts = shown.split("/")
    for i in range(len(parts)):
        candidate = os.path.join(directory, *parts[i:])
        if os.path.isfile(candidate):
            return candidate
    return os.path.join(directory, shown)


def lint(directory: str) -> list[StaticFinding]:
    """Run ``txnsafety lint`` on ``directory`` (its JSON output) and place each finding."""
    from txnsafety_lint.cli import main as lint_main

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "findings.json")
        # --include-tests: in a checkout the lab lives under fixtures/, a test-fixture folder
        status = lint_main(["--format", "json", "--output", out, "--exit-zero", "--include-tests",
                            directory])
        if status != 0:
            raise RuntimeError(f"txnsafety lint could not check {directory} (exit status {status})")
        with open(out, encoding="utf-8") as fh:
            raw = json.load(fh)
    spans: dict[str, list[tuple[int, int, str]]] = {}
    findings = []
    for item in raw:
        path = _resolve(item["path"], directory)
        if path not in spans:
            spans[path] = _functions(path)
        function = next((name for start, end, name in spans[path] if start <= item["line"] <= end), "")
        findings.append(StaticFinding(os.path.relpath(path, directory), item["line"], item["column"],
                                      item["code"], item["message"], function))
    return findings
