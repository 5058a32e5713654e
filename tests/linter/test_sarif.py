"""SARIF 2.1.0 output checked against a schema of the fields GitHub code scanning needs."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from txnsafety_lint.analysis import analyze_source
from txnsafety_lint.report.formats import sarif

from .helpers import FIXTURES, fixture_config

SCHEMA = json.loads((Path(__file__).parent / "sarif-2.1.0-github-subset.schema.json").read_text())


def _findings():
    out = []
    for path in sorted(FIXTURES.glob("django_*.py")):
        src = path.read_text()
        out += analyze_source(src, fixture_config(src), str(path.relative_to(FIXTURES.parents[1])))
    return out


def test_sarif_validates():
    findings = _findings()
    assert findings
    doc = json.loads(sarif(findings))
    jsonschema.validate(doc, SCHEMA, format_checker=jsonschema.FormatChecker())
    run = doc["runs"][0]
    assert doc["version"] == "2.1.0"
    rule_ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    for res in run["results"]:
        assert rule_ids[res["ruleIndex"]] == res["ruleId"]
        uri = res["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        assert uri.startswith("fixtures/lint/") and not uri.startswith("/")
    assert len({r["partialFingerprints"]["txnsafety/v2"] for r in run["results"]}) == len(findings)


def test_empty_sarif_validates():
    doc = json.loads(sarif([]))
    jsonschema.validate(doc, SCHEMA)
    assert doc["runs"][0]["results"] == []


def test_schema_rejects_what_github_rejects():
    doc = json.loads(sarif(_findings()[:1]))
    doc["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]["startLine"] = 0
    try:
        jsonschema.validate(doc, SCHEMA)
    except jsonschema.ValidationError:
        pass
    else:  # pragma: no cover
        raise AssertionError("schema accepted startLine 0")
