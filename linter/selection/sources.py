"""Reading one source file, with one-line reasons for files that cannot be analysed.

A lint run must never show a traceback: every way a file can fail (unreadable, not
UTF-8, too large, not Python, too deeply nested) becomes a :class:`FileProblem` whose
message is printed after the file name.
"""
from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
import warnings
from typing import Optional

from ..facts.config import Config
from ..facts.model import Finding
from ..facts.syntax import source_lines

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z0-9]+(?:[,\s]+[A-Z0-9]+)*))?", re.IGNORECASE)


_LONE_CR = re.compile(r"\r(?!\n)")


class FileProblem(Exception):
    """A file that cannot be analysed; the message says why."""


def read_source(path: str, max_bytes: int) -> str:
    try:
        with open(path, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise FileProblem(f"cannot read file: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise FileProblem(f"skipped: file is larger than {max_bytes} bytes (raise max-bytes to "
                          f"check it)")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        text = data.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError) as exc:
        raise FileProblem(f"not valid UTF-8 (nor its declared encoding): {exc}") from None
    # Python reads source with universal newlines: a lone CR (old Mac files) ends a line.
    # The analysis numbers such text wrongly, so it gets the text Python compiles.
    return _LONE_CR.sub("\n", text) if "\r" in text else text


def noqa_filter(findings: list[Finding], source: str) -> list[Finding]:
    """Drop findings silenced by ``# noqa`` / ``# noqa: TXN101`` on their line."""
    if "noqa" not in source:
        return findings
    lines = source_lines(source)
    out = []
    for f in findings:
        text = lines[f.line - 1] if 0 < f.line <= len(lines) else ""
        m = _NOQA.search(text)
        if m:
            codes = m.group("codes")
            if not codes:
                continue
            wanted = {c.upper() for c in re.split(r"[,\s]+", codes) if c}
            if any(f.code.startswith(c) for c in wanted):
                continue
        out.append(f)
    return out


def parse_file(path: str, cfg: Config) -> Optional[tuple[str, ast.AST]]:
    """(source, tree), or None for an empty file; FileProblem when it cannot be analysed."""
    source = read_source(path, cfg.max_bytes)
    if not source.strip():
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")          # SyntaxWarning etc. are not ours to report
            tree = ast.parse(source, filename=path)
    except SyntaxError as exc:
        raise FileProblem(f"cannot parse: {exc.msg} (line {exc.lineno}){_newer_syntax(source, exc.lineno)}") from None
    except (ValueError, MemoryError, RecursionError) as exc:
        raise FileProblem(f"cannot parse: {exc.__class__.__name__}: {exc}") from None
    return source, tree


#: the statements Python 3.12 added (PEP 695 type aliases and type parameters) and its
#: f-strings that nest their own quotes (PEP 701): what an older Python stops at
_NEWER_SYNTAX = re.compile(r"^\s*(?:type\s+\w+\s*(?:\[.*\])?\s*=|(?:async\s+)?def\s+\w+\s*\[|class\s+\w+\s*\[)"
                           r"|\bf(['\"]).*\{[^}]*\1")


def _newer_syntax(source: str, lineno: Optional[int]) -> str:
    """A hint when the line the parser stopped at is newer Python than the one running the lint.

    The analysis reads modules with the standard library's ``ast``, which knows only the
    running interpreter's grammar: a project written for Python 3.12 (``type X = ...``,
    ``def f[T]()``) linted under 3.11 cannot be read.  The hint says to run the linter under
    the project's Python rather than calling the file broken.  (A second parser that knows
    the newer grammar would tell it surely, but libcst's crashes the process on pathological
    nesting, so the line is matched instead.)"""
    lines = source.splitlines()
    if sys.version_info >= (3, 12) or not lineno or lineno > len(lines) or \
            not _NEWER_SYNTAX.search(lines[lineno - 1]):
        return ""
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    return (f"; the line looks like syntax newer than Python {running} (the Python running the "
            f"linter): run txnsafety lint under the project's Python")
