"""Output formats: text, json, sarif (2.1.0, for GitHub code scanning), github annotations."""
from __future__ import annotations

import json
import os
from typing import Iterable

from txnsafety.codes import CODES

from .config import LINTER_CODES, OPT_IN_CODES
from .model import Finding

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
DOCS_BASE = "https://github.com/txnsafety/txnsafety/blob/main/docs/codes/"


def _tool_version() -> str:
    try:
        from importlib.metadata import version
        return version("txnsafety")
    except Exception:  # pragma: no cover
        return "0.1.0"


def text(findings: Iterable[Finding]) -> str:
    return "".join(f"{f.path}:{f.line}:{f.col + 1}: {f.message}\n" for f in findings)


def as_json(findings: Iterable[Finding]) -> str:
    out = []
    for f in findings:
        code = CODES[f.code]
        out.append({"path": f.path, "line": f.line, "column": f.col + 1, "code": f.code,
                    "kind": code.kind, "message": f.message})
    return json.dumps(out, indent=2) + "\n"


def _escape_gh(value: str, prop: bool = False) -> str:
    value = value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if prop:
        value = value.replace(":", "%3A").replace(",", "%2C")
    return value


def github(findings: Iterable[Finding]) -> str:
    lines = []
    for f in findings:
        title = f"{f.code} {CODES[f.code].kind}"
        lines.append(f"::error file={_escape_gh(f.path, True)},line={f.line},col={f.col + 1},"
                     f"title={_escape_gh(title, True)}::{_escape_gh(f.message)}")
    return "".join(line + "\n" for line in lines)


def _uri(path: str) -> str:
    rel = path
    if os.path.isabs(path):
        try:
            rel = os.path.relpath(path)
        except ValueError:  # pragma: no cover - other drive on Windows
            rel = path
    return rel.replace(os.sep, "/")


def sarif(findings: Iterable[Finding]) -> str:
    findings = list(findings)
    rules = []
    index = {}
    for i, code in enumerate(LINTER_CODES):
        c = CODES[code]
        index[code] = i
        rules.append({
            "id": code,
            "name": "".join(w.capitalize() for w in c.kind.replace("-", " ").split()),
            "shortDescription": {"text": f"{c.kind}: {c.summary}"},
            "fullDescription": {"text": c.summary},
            "helpUri": DOCS_BASE + f"{code}.md",
            "help": {"text": f"{code} {c.kind}: {c.summary}. See docs/codes/{code}.md."},
            "defaultConfiguration": {"level": "note" if code in OPT_IN_CODES else "error",
                                     "enabled": code not in OPT_IN_CODES},
            "properties": {"tags": ["concurrency", "correctness", "data-loss"],
                           "precision": "medium"},
        })
    results = []
    for f in findings:
        results.append({
            "ruleId": f.code,
            "ruleIndex": index[f.code],
            "level": "error",
            "message": {"text": f.message},
            "locations": [{"physicalLocation": {
                "artifactLocation": {"uri": _uri(f.path), "uriBaseId": "%SRCROOT%"},
                "region": {"startLine": f.line, "startColumn": f.col + 1},
            }}],
            "partialFingerprints": {"txnsafety/v1": _fingerprint(f)},
        })
    doc = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "txnsafety",
                "version": _tool_version(),
                "informationUri": "https://github.com/txnsafety/txnsafety",
                "rules": rules,
            }},
            "results": results,
            "columnKind": "unicodeCodePoints",
        }],
    }
    return json.dumps(doc, indent=2) + "\n"


def _fingerprint(f: Finding) -> str:
    import hashlib
    return hashlib.sha256(f"{f.path}|{f.code}|{f.message}".encode()).hexdigest()[:32]


FORMATS = {"text": text, "json": as_json, "sarif": sarif, "github": github}
