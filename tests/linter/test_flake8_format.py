"""The flake8 report formatters (for the ``flake8.report`` entry points)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import jsonschema
from flake8.violation import Violation

from txnsafety_lint.report.flake8_format import GithubFormatter, SarifFormatter

SCHEMA = json.loads((Path(__file__).parent / "sarif-2.1.0-github-subset.schema.json").read_text())


def options(tmp_path=None):
    return argparse.Namespace(output_file=str(tmp_path / "out.sarif") if tmp_path else None,
                              color="never", tee=False, show_source=False)


VIOLATIONS = [
    Violation("TXN101", "app/views.py", 9, 9, "half-protected: `a` read at line 6 ...", None),
    Violation("E501", "app/views.py", 3, 80, "line too long (120 > 79 characters)", None),
]


def test_sarif_formatter(tmp_path):
    fmt = SarifFormatter(options(tmp_path))
    fmt.start()
    for v in VIOLATIONS:
        fmt.handle(v)
    fmt.stop()
    doc = json.loads((tmp_path / "out.sarif").read_text())
    jsonschema.validate(doc, SCHEMA)
    results = doc["runs"][0]["results"]
    assert [r["ruleId"] for r in results] == ["TXN101", "E501"]
    assert results[0]["message"]["text"].startswith("TXN101 half-protected")


def test_github_formatter():
    fmt = GithubFormatter(options())
    line = fmt.format(VIOLATIONS[0])
    assert line.startswith("::error file=app/views.py,line=9,col=9,title=TXN101::TXN101 half")
