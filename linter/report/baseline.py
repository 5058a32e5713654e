"""Baseline files: adopt the linter on a legacy codebase, fail only on new findings.

Version 2 (written now) stores :func:`identity.base_fingerprint`, which does not depend
on line numbers, on how paths were spelt or on the working directory: a baseline written
with ``txnsafety lint .`` matches when pre-commit passes file names.  Each entry absorbs
one finding.  Version 1 files (path as spelt + code + message) are still read, by
recomputing the old fingerprint under the spelling the file recorded; a note asks to
rewrite them.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Optional

from .identity import base_fingerprint, message_key
from ..facts.model import Finding

VERSION = 2


@dataclasses.dataclass
class BaselineResult:
    findings: list[Finding]
    note: Optional[str] = None


def write_baseline(path: str, findings: list[Finding]) -> None:
    entries = [{"path": f.path, "code": f.code, "function": f.function, "line": f.line,
                "fingerprint": base_fingerprint(f)} for f in findings]
    with open(path, "w", encoding="utf-8") as fh:
        json.dump({"version": VERSION, "tool": "txnsafety-lint", "findings": entries}, fh,
                  indent=2)
        fh.write("\n")


def _v1_fingerprint(f: Finding, spelt: str) -> str:
    text = f"{spelt.replace(os.sep, '/')}|{f.code}|{message_key(f.message)}"
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _normalise(spelt: str, root: str) -> str:
    from ..selection.files import shown_path
    if os.path.isabs(spelt):
        return shown_path(spelt, root)
    spelt = spelt.replace("\\", "/")
    while spelt.startswith("./"):
        spelt = spelt[2:]
    return spelt


def apply_baseline(path: str, findings: list[Finding], root: str) -> BaselineResult:
    """The findings not absorbed by the baseline at ``path``; ValueError if it is not one."""
    with open(path, encoding="utf-8") as fh:
        try:
            data = json.load(fh)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("findings"), list):
        raise ValueError("not a txnsafety baseline file")
    version = data.get("version", 1)
    if version not in (1, VERSION):
        raise ValueError(f"baseline version {version!r} is not supported; rewrite it with "
                         f"--write-baseline")
    budget: dict[str, int] = {}
    spellings: dict[str, set[str]] = {}
    for entry in data["findings"]:
        if not isinstance(entry, dict):
            raise ValueError("not a txnsafety baseline file")
        fp = str(entry.get("fingerprint"))
        budget[fp] = budget.get(fp, 0) + 1
        if version == 1 and isinstance(entry.get("path"), str):
            spellings.setdefault(_normalise(entry["path"], root), set()).add(entry["path"])
    out = []
    for f in findings:
        if version == 1:
            candidates = [_v1_fingerprint(f, s) for s in sorted(spellings.get(f.path, ()))]
        else:
            candidates = [base_fingerprint(f)]
        fp = next((c for c in candidates if budget.get(c, 0) > 0), None)
        if fp is None:
            out.append(f)
        else:
            budget[fp] -= 1
    note = None
    if version == 1:
        note = (f"{path} is a version 1 baseline (its fingerprints depend on how paths were "
                f"spelt); rewrite it with --write-baseline {path}")
    return BaselineResult(out, note)
