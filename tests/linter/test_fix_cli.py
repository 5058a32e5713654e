"""``txnsafety lint --fix / --unsafe-fixes / --diff``, the settings, and what a fix must never
do: write over a file changed since it was linted, leave a file that does not parse, lose
its line endings, or change anything the second time."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import jsonschema
import pytest

from txnsafety_lint.cli import main
from txnsafety_lint.fix.apply import fixed, write
from txnsafety_lint.fix.model import Applicability, Edit, Fix
from txnsafety_lint.fix.plan import plan_file
from txnsafety_lint.analysis import analyze_source

from .test_sarif import SCHEMA

COUNTER = textwrap.dedent("""\
    from shop.models import Article


    def view(pk):
        article = Article.objects.get(pk=pk)
        article.credits += 1
        article.save()
    """)
LOCK = textwrap.dedent("""\
    from django.db import transaction
    from shop.models import Seat


    def hold(pk):
        seat = Seat.objects.select_for_update().get(pk=pk)
        seat.taken = True
        seat.save(update_fields=["taken"])
    """)
OVERRIDDEN = textwrap.dedent("""\
    from django.db import models


    class Tally(models.Model):
        def save(self, *args, **kwargs):
            super().save(*args, **kwargs)


    def bump(pk):
        tally = Tally.objects.get(pk=pk)
        tally.n += 1
        tally.save()
    """)
UNFIXABLE = textwrap.dedent("""\
    from shop.models import Shop


    def sign(pk, who):
        shop = Shop.objects.get(pk=pk)
        shop.bio = shop.bio + f"-- {who}"
        shop.save()
    """)


@pytest.fixture
def project(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.txnsafety]\n")
    (tmp_path / "views.py").write_text(COUNTER)
    (tmp_path / "locks.py").write_text(LOCK)
    (tmp_path / "other.py").write_text(UNFIXABLE)
    return tmp_path


def lint(root, *args):
    return main([str(root), "--no-cache", *args])


def test_text_marks_fixable_findings_and_counts_them(project, capsys):
    assert lint(project) == 1
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert [line.split(": ", 1)[1][:10] for line in lines] == \
        ["TXN108 [*]", "TXN102 unp", "TXN106 [*]"]
    assert "2 fixable with --fix (1 more with --unsafe-fixes)\n" in captured.err
    assert (project / "views.py").read_text() == COUNTER          # nothing written


def test_fix_rewrites_then_a_second_fix_changes_nothing(project, capsys):
    assert lint(project, "--fix") == 1                     # the TXN102 has no fix: it remains
    captured = capsys.readouterr()
    assert "fixed 2 findings in 2 file(s)" in captured.err
    assert captured.out.count(": TXN") == 1 and "TXN102" in captured.out
    fixed_views = (project / "views.py").read_text()
    assert 'Article.objects.filter(pk=article.pk).update(credits=F("credits") + 1)' in fixed_views
    assert "with transaction.atomic():" in (project / "locks.py").read_text()
    before = {p.name: p.read_bytes() for p in project.glob("*.py")}
    assert lint(project, "--fix") == 1
    assert "fixed" not in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in project.glob("*.py")} == before


def test_diff_shows_what_fix_writes_and_changes_nothing(project, capsys, tmp_path_factory):
    copy = tmp_path_factory.mktemp("copy")
    for p in project.iterdir():
        (copy / p.name).write_bytes(p.read_bytes())
    assert lint(project, "--diff") == 1
    captured = capsys.readouterr()
    assert "--- a/" in captured.out and "+    Article.objects.filter(pk=article.pk)" in captured.out
    assert "would fix 2 findings" in captured.err
    assert (project / "views.py").read_text() == COUNTER
    patch = copy / "fix.diff"
    patch.write_text(captured.out.replace(str(project) + "/", ""))
    subprocess.run(["git", "apply", "-p1", "--unsafe-paths", str(patch)], cwd=copy, check=True)
    lint(project, "--fix")
    capsys.readouterr()
    for name in ("views.py", "locks.py"):
        assert (copy / name).read_text() == (project / name).read_text(), name
    assert lint(project, "--diff") == 0
    assert capsys.readouterr().out == ""


def test_unsafe_fixes_only_with_the_flag(tmp_path, capsys):
    (tmp_path / "pyproject.toml").write_text("[tool.txnsafety]\n")
    (tmp_path / "tally.py").write_text(OVERRIDDEN)
    assert lint(tmp_path) == 1
    captured = capsys.readouterr()
    assert "[*]" not in captured.out and "0 fixable with --fix (1 more with --unsafe-fixes)" in captured.err
    assert lint(tmp_path, "--fix") == 1
    assert (tmp_path / "tally.py").read_text() == OVERRIDDEN
    capsys.readouterr()
    assert lint(tmp_path, "--fix", "--unsafe-fixes") == 0
    assert "update(n=F(\"n\") + 1)" in (tmp_path / "tally.py").read_text()


def test_fix_from_pyproject_and_a_bad_value_names_the_setting(project, capsys):
    (project / "pyproject.toml").write_text("[tool.txnsafety]\nfix = true\n")
    assert lint(project, "--no-fix") == 1
    assert (project / "views.py").read_text() == COUNTER
    assert lint(project) == 1
    assert "update(credits=" in (project / "views.py").read_text()
    (project / "pyproject.toml").write_text('[tool.txnsafety]\nunsafe-fixes = "sometimes"\n')
    capsys.readouterr()
    assert lint(project) == 2
    assert "'unsafe-fixes'" in capsys.readouterr().err


def test_crlf_line_endings_are_kept(tmp_path, capsys):
    (tmp_path / "pyproject.toml").write_text("[tool.txnsafety]\n")
    path = tmp_path / "views.py"
    path.write_bytes(COUNTER.replace("\n", "\r\n").encode())
    assert lint(tmp_path, "--fix") == 0
    data = path.read_bytes()
    assert b"update(credits=" in data and b"import F\r\n" in data
    assert data.count(b"\n") == data.count(b"\r\n")


def test_a_file_changed_since_it_was_linted_is_not_written(project):
    path = project / "views.py"
    findings = [f for f in analyze_source(COUNTER, None, str(path))]
    plan = plan_file(str(path), findings)
    outcome = fixed(plan, unsafe_fixes=False)
    assert outcome.new is not None
    path.write_text(COUNTER + "\n# edited meanwhile\n")
    assert write(plan, outcome) == "not fixed: the file changed since it was linted"
    assert path.read_text().endswith("# edited meanwhile\n")
    path.write_text(COUNTER)
    assert write(plan, outcome) is None and "update(credits=" in path.read_text()


def test_a_fix_that_would_not_parse_is_refused(project):
    path = project / "views.py"
    finding = analyze_source(COUNTER, None, str(path))[0]
    plan = plan_file(str(path), [finding])
    plan.fixes[finding] = Fix("broken", Applicability.SAFE, (Edit(5, 6, "    article = (\n"),))
    outcome = fixed(plan, unsafe_fixes=False)
    assert outcome.new is None and "would not parse" in outcome.problem
    assert write(plan, outcome) is None and path.read_text() == COUNTER


def test_sarif_fixes_replay_to_what_fix_writes(project, capsys, tmp_path_factory):
    assert lint(project, "--format", "sarif") == 1
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, SCHEMA, format_checker=jsonschema.FormatChecker())
    results = doc["runs"][0]["results"]
    with_fix = {r["ruleId"]: r["fixes"][0] for r in results if "fixes" in r}
    assert set(with_fix) == {"TXN102", "TXN106", "TXN108"}
    assert "(unsafe)" in with_fix["TXN102"]["description"]["text"]
    change = with_fix["TXN106"]["artifactChanges"][0]
    assert change["artifactLocation"]["uri"] == "views.py"
    lines = COUNTER.splitlines(keepends=True)
    for rep in sorted(change["replacements"], key=lambda r: -r["deletedRegion"]["startLine"]):
        region = rep["deletedRegion"]
        assert region["startColumn"] == region["endColumn"] == 1
        lines[region["startLine"] - 1:region["endLine"] - 1] = [rep["insertedContent"]["text"]]
    lint(project, "--fix")
    assert "".join(lines) == (project / "views.py").read_text()


def test_json_output_has_no_fix_key(project, capsys):
    lint(project, "--format", "json")
    assert all(set(d) == {"path", "line", "column", "code", "kind", "message", "function",
                          "confidence", "severity", "severity_reason"}
               for d in json.loads(capsys.readouterr().out))


def test_declared_encoding_and_a_bom_are_kept(tmp_path, capsys):
    (tmp_path / "pyproject.toml").write_text("[tool.txnsafety]\n")
    latin = tmp_path / "latin.py"
    text = COUNTER.replace("\n    article.credits", "  # café\n    article.credits", 1)
    latin.write_bytes(("# -*- coding: latin-1 -*-\n" + text).encode("latin-1"))
    bom = tmp_path / "bom.py"
    bom.write_bytes(b"\xef\xbb\xbf" + COUNTER.encode())
    assert lint(tmp_path, "--fix") == 0
    assert "fixed 2 findings" in capsys.readouterr().err
    assert "# café".encode("latin-1") in latin.read_bytes() and b"update(credits=" in latin.read_bytes()
    assert bom.read_bytes().startswith(b"\xef\xbb\xbf") and b"update(credits=" in bom.read_bytes()


def test_flake8_output_has_no_fix_marks(project):
    proc = subprocess.run([sys.executable, "-m", "flake8", "--select", "TXN", "--txn-cache=false",
                           "views.py"], cwd=project, capture_output=True, text=True)
    assert "views.py:7:5: TXN106 lost-update counter:" in proc.stdout, proc.stdout + proc.stderr
    assert "[*]" not in proc.stdout and "fixable" not in proc.stdout + proc.stderr


def test_the_insert_and_the_lock_are_shown_by_diff_applied_only_with_unsafe_fixes_and_once(tmp_path, capsys):
    """The two unsafe fixes through the command: ``--diff`` shows them and their notes and
    writes nothing, ``--fix`` alone leaves them, ``--fix --unsafe-fixes`` applies them, and a
    second run changes nothing."""
    (tmp_path / "pyproject.toml").write_text("[tool.txnsafety]\n")
    app = tmp_path / "app"
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "models.py").write_text(textwrap.dedent("""\
        from sqlalchemy.dialects.postgresql import JSONB
        from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


        class Base(DeclarativeBase):
            pass


        class Tag(Base):
            __tablename__ = "tag"
            id: Mapped[int] = mapped_column(primary_key=True)
            name: Mapped[str] = mapped_column()
            labels: Mapped[dict] = mapped_column(JSONB, default=dict)
        """))
    views = textwrap.dedent("""\
        from app.models import Tag
        from shop.models import Profile


        def add_tag(session, name):
            tag = session.query(Tag).filter_by(name=name).first()
            if tag is None:
                session.add(Tag(name=name))
            session.commit()


        def prefer(pk, key, value):
            profile = Profile.objects.using("users").get(pk=pk)
            profile.prefs = {**profile.prefs, key: value}
            profile.save()
        """)
    (app / "views.py").write_text(views)
    args = ("--min-severity", "low")
    lint(tmp_path, *args, "--diff", "--unsafe-fixes")
    captured = capsys.readouterr()
    # one pass: both add an import at the same line, so the lock waits for the next pass
    assert "+    session.execute(insert(Tag).values(name=name).on_conflict_do_nothing(" in captured.out
    assert 'UniqueConstraint("name", name="uq_tag_name")' in captured.err
    assert (app / "views.py").read_text() == views
    lint(tmp_path, *args, "--fix")
    assert (app / "views.py").read_text() == views
    capsys.readouterr()
    lint(tmp_path, *args, "--fix", "--unsafe-fixes")
    fixed_text = (app / "views.py").read_text()
    assert "on_conflict_do_nothing" in fixed_text
    assert '    with user_write_lock(f"profile:{pk}"):\n        profile = Profile.objects' in fixed_text
    assert "TXNSAFETY_LOCK_URL" in capsys.readouterr().err          # the lock's note
    lint(tmp_path, *args, "--fix", "--unsafe-fixes")
    assert (app / "views.py").read_text() == fixed_text
    lint(tmp_path, *args, "--diff", "--unsafe-fixes")
    assert capsys.readouterr().out == ""
