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


def lint(directory: str) -> list[StaticFinding]:
    """Run ``txnsafety lint`` on ``directory`` (its JSON output) and place each finding."""
    from txnsafety_lint.cli import main as lint_main

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "findings.json")
        status = lint_main(["--format", "json", "--output", out, "--exit-zero", directory])
        if status != 0:
            raise RuntimeError(f"txnsafety lint could not check {directory} (exit status {status})")
        with open(out, encoding="utf-8") as fh:
            raw = json.load(fh)
    spans: dict[str, list[tuple[int, int, str]]] = {}
    findings = []
    for item in raw:
        path = item["path"]
        if path not in spans:
            spans[path] = _functions(path)
        function = next((name for start, end, name in spans[path] if start <= item["line"] <= end), "")
        findings.append(StaticFinding(os.path.relpath(path, directory), item["line"], item["column"],
                                      item["code"], item["message"], function))
    return findings
