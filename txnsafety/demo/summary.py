"""What the demo prints: the static findings, the table racy vs fixed, sample reports, the verdict."""
from __future__ import annotations

import os
from collections import Counter
from typing import Any, Sequence

from .load import Outcome, by_cell
from .static import StaticFinding, codes_in

SERVER_LABEL = {"wsgi": "WSGI", "asgi": "ASGI"}


def short_site(site: str | None) -> str:
    """``/long/path/endpoints.py:42 in f`` -> ``endpoints.py:42 in f``."""
    if not site:
        return "-"
    path, _, rest = site.partition(":")
    return f"{os.path.basename(path)}:{rest}"


def _codes_text(codes: Counter) -> str:
    return ", ".join(f"{code} x{n}" for code, n in sorted(codes.items())) or "none"


def print_findings(findings: Sequence[StaticFinding]) -> None:
    """Step 1's output: each finding's place, code, handler and explanation."""
    if not findings:
        print("  no findings")
    for f in findings:
        where = f" in {f.function}()" if f.function else ""
        print(f"  {f.path}:{f.line}  {f.code}{where}")
        print(f"      {_first_clause(f.message)}")


def _first_clause(message: str) -> str:
    """The finding's explanation without its code prefix, cut to fit a terminal line or two."""
    head = message.split(": ", 1)[-1]
    return head if len(head) <= 150 else head[:147] + "..."


def verdict(classes: Sequence[Any], outcomes: Sequence[Outcome], findings: Sequence[StaticFinding]) -> dict[str, Any]:
    """ok is False if any fixed twin lost a write, failed a request or was reported; racy misses are notes."""
    problems, notes = [], []
    by_variant: dict[tuple[str, str], list[Outcome]] = {}
    for outcome in outcomes:
        by_variant.setdefault((outcome.class_slug, outcome.variant), []).append(outcome)
    for stomp_class in classes:
        for variant in stomp_class.variants:
            name = f"{stomp_class.slug} / {variant.name}"
            for o in by_variant.get((stomp_class.slug, variant.name), []):
                on = f"{name} on {SERVER_LABEL[o.server]}"
                if o.failed:
                    problems.append(f"{on}: {o.failed} of {o.requests} requests failed")
                if variant.racy:
                    if not o.wrong:
                        notes.append(f"{on}: no write {stomp_class.damage} this time (a race is "
                                     f"a matter of timing: run again, or raise --think-ms)")
                    continue
                if o.wrong:
                    problems.append(f"{on}: {o.wrong} writes {stomp_class.damage}")
                if o.codes:
                    problems.append(f"{on}: reported by the checker ({_codes_text(o.codes)})")
            if not variant.racy and codes_in(findings, variant.function):
                problems.append(f"{name}: flagged by the linter "
                                f"({', '.join(codes_in(findings, variant.function))})")
    return {"ok": not problems, "problems": problems, "notes": notes}


def print_table(classes: Sequence[Any], outcomes: Sequence[Outcome], findings: Sequence[StaticFinding],
                servers: Sequence[str]) -> None:
    """The racy-vs-fixed table: damage per server, runtime reports, static findings."""
    cells = by_cell(outcomes)
    head = (f"{'class':<16}{'variant':<19}"
            + "".join(f"{SERVER_LABEL[s] + ' damage':<17}" for s in servers)
            + f"{'runtime reports':<22}{'static findings'}")
    print(head)
    print("-" * len(head))
    for stomp_class in classes:
        for i, variant in enumerate(stomp_class.variants):
            first = f"{stomp_class.slug:<16}" if i == 0 else f"{'  ' + stomp_class.code if i == 1 else '':<16}"
            row = f"{first}{variant.name:<19}"
            reported: Counter = Counter()
            for server in servers:
                o = cells.get((server, stomp_class.slug, variant.name))
                if o is None:
                    row += f"{'-':<16} "
                    continue
                reported += o.codes
                damage = f"{o.wrong} {stomp_class.damage}" if o.wrong else "0"
                if o.failed:
                    damage += f" ({o.failed} failed)"
                row += f"{damage:<16} "
            row += f"{_codes_text(reported):<21} {', '.join(codes_in(findings, variant.function)) or 'none'}"
            print(row)
    print("\ndamage: writes lost (or duplicated) = what the requests should have left in the database minus "
          "what they left.")


def print_reports(reports: Sequence[dict[str, Any]]) -> None:
    """One report per code, as the checker wrote it (sites, never values)."""
    if not reports:
        return
    print("\nOne runtime report of each kind (the HTML report draws the race behind each):")
    seen = set()
    for report in reports:
        if report["code"] in seen:
            continue
        seen.add(report["code"])
        print(f"\n  {report['code']} {report['kind']}: {report['model'].rsplit('.', 1)[-1]} {report['key']}")
        print(f"      read at  {short_site(report['read_site'])}")
        print(f"      write at {short_site(report['write_site'])}")
        if report.get("other_write_site"):
            print(f"      other write at {short_site(report['other_write_site'])}")


def print_verdict(verdict_: dict[str, Any], paths: Sequence[str], seconds: float) -> None:
    """Where the report went, the notes, and OK or the list of what failed."""
    print("\nReport: " + "  ".join(paths))
    for note in verdict_["notes"]:
        print(f"note: {note}")
    if verdict_["ok"]:
        print(f"OK: every fixed twin kept every write and was reported by no one ({seconds:.1f} s).")
    else:
        print("FAILED:")
        for problem in verdict_["problems"]:
            print(f"  {problem}")
