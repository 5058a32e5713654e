"""``txnsafety lint PATH...`` (also ``python -m txnsafety_lint``).

Exit status: 0 nothing found, 1 findings (not in the baseline), 2 usage error or a
file that could not be analysed (the reason is printed, never a traceback).
"""
from __future__ import annotations

import argparse
import ast
import io
import json
import os
import re
import sys
import tokenize
import warnings
from typing import Iterable, Optional, Sequence

from .analysis import Prefilter, analyze_project, analyze_source, source_lines
from .config import LINTER_CODES, Config, config_from, find_pyproject
from .model import Finding
from .report import FORMATS

_SKIP_DIRS = {".git", ".hg", ".svn", "__pycache__", ".tox", ".nox", ".venv", "venv", "env",
              "node_modules", "build", "dist", ".eggs", ".mypy_cache", ".pytest_cache"}
_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z0-9]+(?:[,\s]+[A-Z0-9]+)*))?", re.IGNORECASE)


class FileProblem(Exception):
    """A file that cannot be analysed; the message says why."""


def iter_python_files(paths: Sequence[str], exclude: Sequence[str] = ()) -> Iterable[str]:
    for path in paths:
        if os.path.isdir(path):
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith(".")
                                 and not _excluded(os.path.join(root, d), exclude))
                for name in sorted(files):
                    full = os.path.join(root, name)
                    if name.endswith(".py") and not _excluded(full, exclude):
                        yield full
        else:
            yield path


def _excluded(path: str, patterns: Sequence[str]) -> bool:
    import fnmatch
    norm = path.replace(os.sep, "/")
    return any(fnmatch.fnmatch(norm, p) or fnmatch.fnmatch(os.path.basename(norm), p) or
               ("/" + p.strip("/") + "/") in ("/" + norm + "/") for p in patterns)


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
        return data.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError) as exc:
        raise FileProblem(f"not valid UTF-8 (nor its declared encoding): {exc}") from None


def noqa_filter(findings: list[Finding], source: str) -> list[Finding]:
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
            warnings.simplefilter("ignore")
            tree = ast.parse(source, filename=path)
    except SyntaxError as exc:
        raise FileProblem(f"cannot parse: {exc.msg} (line {exc.lineno})") from None
    except (ValueError, MemoryError, RecursionError) as exc:
        raise FileProblem(f"cannot parse: {exc.__class__.__name__}: {exc}") from None
    return source, tree


def lint_file(path: str, cfg: Config, prefilter: Optional[Prefilter] = None) -> list[Finding]:
    source = read_source(path, cfg.max_bytes)
    if not source.strip():
        return []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")          # SyntaxWarning etc. are not ours to report
            tree = ast.parse(source, filename=path)
    except SyntaxError as exc:
        raise FileProblem(f"cannot parse: {exc.msg} (line {exc.lineno})") from None
    except (ValueError, MemoryError, RecursionError) as exc:
        raise FileProblem(f"cannot parse: {exc.__class__.__name__}: {exc}") from None
    try:
        findings = analyze_source(source, cfg, path, tree=tree, prefilter=prefilter)
    except RecursionError:
        raise FileProblem("skipped: the code is nested too deeply to analyse") from None
    except Exception as exc:  # noqa: BLE001 - a lint run must never show a traceback
        raise FileProblem(f"internal error while analysing ({exc.__class__.__name__}: {exc}); "
                          f"please report it") from None
    return noqa_filter(findings, source)


# ------------------------------------------------------------------ baseline

_LINE_REF = re.compile(r"\blines? \d+(?:/\d+)?")


def fingerprint(f: Finding) -> str:
    import hashlib
    path = f.path.replace(os.sep, "/")
    msg = _LINE_REF.sub("line N", f.message)
    return hashlib.sha256(f"{path}|{f.code}|{msg}".encode()).hexdigest()[:24]


def write_baseline(path: str, findings: list[Finding]) -> None:
    entries = [{"path": f.path.replace(os.sep, "/"), "code": f.code, "line": f.line,
                "fingerprint": fingerprint(f)} for f in findings]
    with open(path, "w", encoding="utf-8") as fh:
        json.dump({"version": 1, "tool": "txnsafety-lint", "findings": entries}, fh, indent=2)
        fh.write("\n")


def apply_baseline(path: str, findings: list[Finding]) -> list[Finding]:
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if not isinstance(data, dict) or not isinstance(data.get("findings"), list):
        raise ValueError("not a txnsafety baseline file")
    budget: dict[str, int] = {}
    for entry in data["findings"]:
        fp = entry.get("fingerprint")
        budget[fp] = budget.get(fp, 0) + 1
    out = []
    for f in findings:
        fp = fingerprint(f)
        if budget.get(fp, 0) > 0:
            budget[fp] -= 1
        else:
            out.append(f)
    return out


# ------------------------------------------------------------------ main

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="txnsafety lint",
                                description="Find lost-write (data stomping) bugs in Python code.")
    p.add_argument("paths", nargs="*", default=["."], help="files or directories (default: .)")
    p.add_argument("--format", choices=sorted(FORMATS), default="text")
    p.add_argument("--output", "-o", help="write the report to this file instead of stdout")
    p.add_argument("--baseline", help="ignore findings recorded in this baseline file")
    p.add_argument("--write-baseline", metavar="FILE",
                   help="record the current findings in FILE and exit 0")
    p.add_argument("--config", help="pyproject.toml to read [tool.txnsafety] from "
                                    "(default: the nearest one)")
    p.add_argument("--enable", action="append", default=[], help="enable opt-in codes, e.g. TXN109")
    p.add_argument("--disable", action="append", default=[], help="do not report these codes")
    p.add_argument("--isolation", help="assumed isolation level (read committed, serializable, ...)")
    p.add_argument("--exclude", action="append", default=[], help="glob of paths to skip")
    p.add_argument("--no-cross-module", action="store_true",
                   help="analyse each file on its own (no calls followed between modules)")
    p.add_argument("--exit-zero", action="store_true", help="exit 0 even when something is found")
    p.add_argument("--verbose", "-v", action="store_true")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        pyproject = args.config or find_pyproject(args.paths[0] if args.paths else ".")
        cfg = config_from(None, pyproject)
        extra: dict = {}
        if args.enable:
            extra["enable"] = ",".join(args.enable)
        if args.disable:
            extra["disable"] = ",".join(args.disable)
        if args.isolation:
            extra["isolation"] = args.isolation
        cfg.update(extra)
    except (ValueError, OSError) as exc:
        print(f"txnsafety lint: configuration error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # tomllib.TOMLDecodeError and friends
        print(f"txnsafety lint: cannot read configuration: {exc}", file=sys.stderr)
        return 2
    for code in cfg.enable | cfg.disable:
        if code not in LINTER_CODES:
            print(f"txnsafety lint: unknown code {code!r} (known: {', '.join(LINTER_CODES)})",
                  file=sys.stderr)
            return 2

    prefilter = Prefilter(cfg)
    findings: list[Finding] = []
    problems = 0
    missing = [p for p in args.paths if not os.path.exists(p)]
    for p in missing:
        print(f"{p}: error: no such file or directory", file=sys.stderr)
        problems += 1
    roots = [p for p in args.paths if os.path.exists(p)]
    files = list(iter_python_files(roots, args.exclude))
    if args.no_cross_module:
        for path in files:
            try:
                findings.extend(lint_file(path, cfg, prefilter))
            except FileProblem as exc:
                print(f"{path}: error: {exc}", file=sys.stderr)
                problems += 1
    else:
        parsed = []
        for path in files:
            try:
                got = parse_file(path, cfg)
            except FileProblem as exc:
                print(f"{path}: error: {exc}", file=sys.stderr)
                problems += 1
                continue
            if got is not None:
                parsed.append((path, got[0], got[1]))
            elif args.verbose:
                print(f"{path}: note: empty file, nothing to check", file=sys.stderr)
        try:
            results = analyze_project(parsed, cfg, roots, prefilter)
        except Exception:  # noqa: BLE001 - one pathological file must not hide the rest
            # fall back to one file at a time, so the file at fault is named
            results = {}
            for path, source, tree in parsed:
                try:
                    results[path] = analyze_source(source, cfg, path, tree=tree, prefilter=prefilter)
                except Exception as exc:  # noqa: BLE001
                    print(f"{path}: error: skipped ({exc.__class__.__name__})", file=sys.stderr)
                    problems += 1
        sources = {path: source for path, source, _tree in parsed}
        for path, found in results.items():
            findings.extend(noqa_filter(found, sources[path]))
    findings.sort(key=Finding.sort_key)

    if args.write_baseline:
        write_baseline(args.write_baseline, findings)
        print(f"txnsafety lint: wrote {len(findings)} finding(s) to {args.write_baseline}",
              file=sys.stderr)
        return 2 if problems else 0
    if args.baseline:
        try:
            findings = apply_baseline(args.baseline, findings)
        except (OSError, ValueError) as exc:
            print(f"txnsafety lint: cannot use baseline {args.baseline}: {exc}", file=sys.stderr)
            return 2

    report = FORMATS[args.format](findings)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as fh:
            fh.write(report)
    else:
        sys.stdout.write(report)
    if args.verbose:
        print(f"txnsafety lint: {len(files)} file(s), {len(findings)} finding(s), "
              f"{problems} problem(s)", file=sys.stderr)
    if findings and not args.exit_zero:
        return 1
    if problems:
        return 2
    return 0
