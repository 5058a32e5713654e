"""Output formats: text, json, sarif (2.1.0, for GitHub code scanning), github annotations.

Findings arrive with their paths already relative to the project root and their
enclosing function known (the command sets both), so every format shows the same path and
SARIF fingerprints survive moved lines (:mod:`.identity`).
"""
from __future__ import annotations

import functools
import json
import os
from typing import Collection, Iterable, Mapping, Optional
from urllib.parse import urljoin

from txnsafety.code_pages import page
from txnsafety.codes import CODES

from ..facts.config import LINTER_CODES, OPT_IN_CODES
from .identity import fingerprints
from ..facts.model import Finding, Severity
from ..fix.model import Fix

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
FINGERPRINT_KEY = "txnsafety/v2"


def _tool_version() -> str:
    from txnsafety import __version__  # the one source of the version
    return __version__


@functools.lru_cache(maxsize=1)
def documentation_url() -> Optional[str]:
    """The ``Documentation`` project URL of the installed package metadata (setup.cfg's
    ``project_urls``, declared once); None when the package is not installed."""
    try:
        from importlib.metadata import metadata
        entries = metadata("txnsafety").get_all("Project-URL") or []
    except Exception:  # pragma: no cover - running from a bare checkout
        return None
    for entry in entries:
        label, _, url = entry.partition(",")
        if label.strip().lower() == "documentation" and url.strip():
            return url.strip().rstrip("/") + "/"
    return None


def help_uri(code: str) -> Optional[str]:
    """Where ``code``'s page is published: ``<Documentation>codes/TXNnnn.md``."""
    base = documentation_url()
    return urljoin(base, f"codes/{code}.md") if base else None


_COLORS = {"path": "\x1b[1m", "pos": "\x1b[2m", "code": "\x1b[1;31m", "reset": "\x1b[0m"}


def _severity_note(f: Finding) -> str:
    """`` [high: shared: ...; high harm: ...]``: the severity and why, after the message."""
    return f" [{f.severity.label}: {f.severity_reason}]" if f.severity_reason else f" [{f.severity.label}]"


def _marked(f: Finding, fixable: Collection[Finding]) -> str:
    """The message, with Ruff's ``[*]`` after the code when ``--fix`` would fix it."""
    if f not in fixable:
        return f.message
    code, _, rest = f.message.partition(" ")
    return f"{code} [*] {rest}"


def text(findings: Iterable[Finding], color: bool = False,
         fixable: Collection[Finding] = ()) -> str:
    """``path:line:col: TXNnnn message [severity: why]`` lines, as flake8 and Ruff print them;
    ``TXNnnn [*] message`` for the findings in ``fixable``."""
    if not color:
        return "".join(f"{f.path}:{f.line}:{f.col + 1}: {_marked(f, fixable)}{_severity_note(f)}\n"
                       for f in findings)
    c = _COLORS
    out = []
    for f in findings:
        code, _, rest = _marked(f, fixable).partition(" ")
        out.append(f"{c['path']}{f.path}{c['reset']}{c['pos']}:{f.line}:{f.col + 1}:{c['reset']} "
                   f"{c['code']}{code}{c['reset']} {rest}{c['pos']}{_severity_note(f)}{c['reset']}\n")
    return "".join(out)


def as_json(findings: Iterable[Finding]) -> str:
    out = []
    for f in findings:
        code = CODES[f.code]
        out.append({"path": f.path, "line": f.line, "column": f.col + 1, "code": f.code,
                    "kind": code.kind, "message": f.message, "function": f.function,
                    "confidence": f.confidence.label, "severity": f.severity.label,
                    "severity_reason": f.severity_reason})
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
        lines.append(f"::{_GH_LEVEL[f.severity]} file={_escape_gh(f.path, True)},line={f.line},col={f.col + 1},"
                     f"title={_escape_gh(title, True)}::{_escape_gh(f.message)}")
    return "".join(line + "\n" for line in lines)


#: GitHub annotation and SARIF levels, and a rank to sort by (0-100, higher first), by severity
_GH_LEVEL = {Severity.HIGH: "error", Severity.MEDIUM: "warning", Severity.LOW: "notice"}
_SARIF_LEVEL = {Severity.HIGH: "error", Severity.MEDIUM: "warning", Severity.LOW: "note"}
_RANK = {Severity.HIGH: 90.0, Severity.MEDIUM: 50.0, Severity.LOW: 10.0}


def _uri(path: str) -> str:
    """A relative URI (to ``%SRCROOT%``) for a root-relative path; ``file://`` outside it."""
    path = path.replace(os.sep, "/")
    if os.path.isabs(path):
        return "file://" + ("" if path.startswith("/") else "/") + path
    return path


def _artifact(path: str) -> dict:
    uri = _uri(path)
    return {"uri": uri} if uri.startswith("file:") else {"uri": uri, "uriBaseId": "%SRCROOT%"}


def _rule(code: str) -> dict:
    c = CODES[code]
    rule = {
        "id": code,
        "name": "".join(w.capitalize() for w in c.kind.replace("-", " ").split()),
        "shortDescription": {"text": f"{c.kind}: {c.summary}"},
        "fullDescription": {"text": c.summary},
        "help": {"text": f"{code} {c.kind}: {c.summary}. See docs/codes/{code}.md."},
    }
    markdown = page(code)
    if markdown:
        rule["help"]["markdown"] = markdown
    uri = help_uri(code)
    if uri:
        rule["helpUri"] = uri
    return rule


def _sarif_fix(f: Finding, fix: Fix) -> dict:
    """A SARIF ``fix``: the finding's file, its line replacements (a deleted region of whole
    lines, empty for an insertion, and the lines put there)."""
    replacements = [{"deletedRegion": {"startLine": e.start_line, "startColumn": 1,
                                       "endLine": e.end_line, "endColumn": 1},
                     "insertedContent": {"text": e.content}} for e in fix.edits]
    note = f". {fix.note}" if fix.note else ""
    return {"description": {"text": f"{fix.description} ({fix.applicability.value}){note}"},
            "artifactChanges": [{"artifactLocation": _artifact(f.path),
                                 "replacements": replacements}]}


def sarif(findings: Iterable[Finding], fixes: Optional[Mapping[Finding, Fix]] = None) -> str:
    """SARIF 2.1.0; ``fixes``: each finding's fix, shown as a ``fixes`` object when it has
    edits (safe and unsafe alike: the description says which)."""
    findings = sorted(findings, key=Finding.sort_key)
    fixes = fixes or {}
    prints = fingerprints(findings)
    rules = []
    index = {}
    for i, code in enumerate(LINTER_CODES):
        index[code] = i
        rules.append({
            **_rule(code),
            "defaultConfiguration": {"level": "note" if code in OPT_IN_CODES else "error",
                                     "enabled": code not in OPT_IN_CODES},
            "properties": {"tags": ["concurrency", "correctness", "data-loss"],
                           "precision": "medium"},
        })
    results = []
    for f, fp in zip(findings, prints):
        results.append({
            "ruleId": f.code,
            "ruleIndex": index[f.code],
            "level": _SARIF_LEVEL[f.severity],
            "message": {"text": f.message},
            "locations": [{"physicalLocation": {
                "artifactLocation": _artifact(f.path),
                "region": {"startLine": f.line, "startColumn": f.col + 1},
            }}],
            "partialFingerprints": {FINGERPRINT_KEY: fp},
            "properties": {"confidence": f.confidence.label, "severity": f.severity.label,
                           "severity-reason": f.severity_reason, "rank": _RANK[f.severity]},
        })
        fix = fixes.get(f)
        if fix is not None and fix.available:
            results[-1]["fixes"] = [_sarif_fix(f, fix)]
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


FORMATS = {"text": text, "json": as_json, "sarif": sarif, "github": github}
