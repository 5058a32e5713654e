"""The demo's report: ``report.json`` (the data) and ``report.html`` (the same data, drawn).

The page is one self-contained file: the JSON is embedded in it and a short
script draws the table and, for each runtime report, the race behind it as a
timeline of the requests' reads, writes, transactions and locks.  No network,
no external assets, so it can be attached to a ticket or opened offline.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
from dataclasses import dataclass
from importlib import resources
from typing import Any, Sequence

from .. import __version__
from .load import Outcome, by_cell
from .static import StaticFinding, codes_in

PLACEHOLDER = "/*__TXNSAFETY_DATA__*/"


@dataclass
class Result:
    database: str
    locks: str
    requests: int
    concurrency: int
    think_ms: float
    servers: Sequence[str]
    classes: Sequence[Any]
    outcomes: Sequence[Outcome]
    findings: Sequence[StaticFinding]
    reports: Sequence[dict[str, Any]]
    verdict: dict[str, Any]
    seconds: float


def as_data(result: Result, lab_dir: str) -> dict[str, Any]:
    """The report as plain JSON data (field values never appear: only counts, codes and sites)."""
    cells = by_cell(result.outcomes)
    classes = []
    for c in result.classes:
        variants = []
        for v in c.variants:
            results = {}
            for server in result.servers:
                o = cells.get((server, c.slug, v.name))
                if o is not None:
                    results[server] = {"requests": o.requests, "failed": o.failed, "expected": o.expected,
                                       "stored": o.stored, "damage": o.wrong, "seconds": round(o.seconds, 3),
                                       "reports": dict(o.codes)}
            variants.append({"name": v.name, "racy": v.racy, "cure": v.cure, "function": v.function,
                             "static": codes_in(result.findings, v.function),
                             "results": results})
        classes.append({"slug": c.slug, "code": c.code, "title": c.title, "story": c.story,
                        "damage": c.damage, "variants": variants})
    endpoints = os.path.join(lab_dir, "endpoints.py")
    with open(endpoints, encoding="utf-8") as fh:
        source = fh.read().splitlines()
    return {
        "tool": "txnsafety demo", "version": __version__,
        "generated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "database": result.database, "locks": result.locks, "requests": result.requests,
        "concurrency": result.concurrency, "think_ms": result.think_ms, "servers": list(result.servers),
        "seconds": round(result.seconds, 2), "verdict": result.verdict, "classes": classes,
        "findings": [f.as_dict() for f in result.findings],
        "reports": [_portable(_relative_times(r), lab_dir) for r in result.reports],
        "source": {"file": "endpoints.py", "lines": source},
    }


def _portable(report: dict[str, Any], lab_dir: str) -> dict[str, Any]:
    """Sites as ``txnsafety_lab/endpoints.py:28 in f``: this machine's paths mean nothing elsewhere."""
    prefix = lab_dir + os.sep
    return {k: (v.replace(prefix, "txnsafety_lab/", 1) if k.endswith("_site") and isinstance(v, str) else v)
            for k, v in report.items()}


def _relative_times(report: dict[str, Any]) -> dict[str, Any]:
    """Timeline times in microseconds from the race's first event (absolute clocks mean nothing)."""
    lanes = report.get("timeline") or []
    starts = [e["t_ns"] for lane in lanes for e in lane["events"]]
    origin = min(starts) if starts else 0
    out = dict(report)
    out["timeline"] = [{**lane, "events": [{**{k: v for k, v in e.items() if k != "t_ns"},
                                            "t_us": round((e["t_ns"] - origin) / 1000, 1)}
                                           for e in lane["events"]]}
                       for lane in lanes]
    return out


def render(data: dict[str, Any]) -> str:
    """The HTML page with ``data`` embedded, safe inside its <script> element.

    ``</script>`` would end the element and ``<!--<script>`` would make the
    parser swallow the real end tag; JSON's ``\\u003c`` spellings of ``<``, ``>``
    and ``&`` leave the parser nothing to see.
    """
    template = resources.files(__package__).joinpath("report.html").read_text(encoding="utf-8")
    payload = (json.dumps(data, indent=None)
               .replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))
    return template.replace(PLACEHOLDER, payload)


def write(result: Result, directory: str, lab_dir: str) -> list[str]:
    """Write report.json and report.html into ``directory``; returns their paths."""
    os.makedirs(directory, exist_ok=True)
    data = as_data(result, lab_dir)
    json_path = os.path.join(directory, "report.json")
    html_path = os.path.join(directory, "report.html")
    with open(json_path, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2)
    with open(html_path, "w", encoding="utf-8") as fh:
        fh.write(render(data))
    return [html_path, json_path]
