"""The standalone command: formats, exit status, baseline, files that cannot be analysed."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from txnsafety_lint.analysis import RULES, ModuleAnalyzer, Prefilter
from txnsafety_lint.cli import main
from txnsafety_lint.facts.config import Config

BAD = textwrap.dedent("""\
    from django.db import transaction
    from shop.models import Account


    def withdraw(pk, amount):
        account = Account.objects.get(pk=pk)
        with transaction.atomic():
            account.balance -= amount
            account.save()
    """)
GOOD = textwrap.dedent("""\
    from django.db import transaction
    from shop.models import Account


    def withdraw(pk, amount):
        with transaction.atomic():
            account = Account.objects.select_for_update().get(pk=pk)
            account.balance -= amount
            account.save()
    """)


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "bad.py").write_text(BAD)
    (tmp_path / "pkg" / "good.py").write_text(GOOD)
    return tmp_path


def test_text_output_and_exit_status(tree, capsys):
    assert main([str(tree)]) == 1
    out = capsys.readouterr().out
    assert out.count("TXN101") == 1
    assert "bad.py:9:" in out and "read at line 6" in out and "saved at line 9" in out


def test_clean_code_exits_zero(tree, capsys):
    assert main([str(tree / "pkg" / "good.py")]) == 0
    assert capsys.readouterr().out == ""


def test_json_output(tree, capsys):
    assert main([str(tree), "--format", "json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert [(d["code"], d["line"], d["kind"]) for d in data] == [("TXN101", 9, "half-protected")]
    assert data[0]["path"].endswith("bad.py")


def test_github_annotations(tree, capsys):
    main([str(tree), "--format", "github"])
    out = capsys.readouterr().out.strip()
    assert out.startswith("::error file=")
    assert ",line=9,col=" in out and "title=TXN101 half-protected::TXN101" in out


def test_output_file_and_exit_zero(tree, tmp_path, capsys):
    target = tmp_path / "report.txt"
    assert main([str(tree), "--output", str(target), "--exit-zero"]) == 0
    assert "TXN101" in target.read_text()


def test_disable_and_enable(tree, capsys):
    assert main([str(tree), "--disable", "TXN101"]) == 0
    assert main([str(tree), "--enable", "TXN999"]) == 2
    assert "unknown code" in capsys.readouterr().err


def test_noqa(tmp_path, capsys):
    f = tmp_path / "x.py"
    f.write_text(BAD.replace("account.save()", "account.save()  # noqa: TXN101"))
    assert main([str(f)]) == 0
    f.write_text(BAD.replace("account.save()", "account.save()  # noqa: TXN102"))
    assert main([str(f)]) == 1
    f.write_text(BAD.replace("account.save()", "account.save()  # noqa"))
    assert main([str(f)]) == 0


def test_baseline_reports_only_new_findings(tree, tmp_path, capsys):
    baseline = tmp_path / "baseline.json"
    assert main([str(tree), "--write-baseline", str(baseline)]) == 0
    data = json.loads(baseline.read_text())
    assert data["version"] == 2 and len(data["findings"]) == 1
    assert main([str(tree), "--baseline", str(baseline)]) == 0
    # shifting the old finding down does not make it new
    bad = tree / "pkg" / "bad.py"
    bad.write_text("# a comment\n\n" + BAD)
    assert main([str(tree), "--baseline", str(baseline)]) == 0
    # a second, new finding is reported
    (tree / "pkg" / "new.py").write_text(BAD)
    capsys.readouterr()
    assert main([str(tree), "--baseline", str(baseline)]) == 1
    assert "new.py" in capsys.readouterr().out


def test_bad_baseline_is_a_clear_error(tree, tmp_path, capsys):
    baseline = tmp_path / "baseline.json"
    baseline.write_text("[1, 2]")
    assert main([str(tree), "--baseline", str(baseline)]) == 2
    assert "cannot use baseline" in capsys.readouterr().err


@pytest.mark.parametrize("content, message", [
    (b"def f(:\n    pass\n", "cannot parse"),
    (b"x = '\xff\xfe'\n", "not valid UTF-8"),
    (b"x = 1\x00\n", "cannot parse"),
])
def test_files_that_cannot_be_analysed(tmp_path, capsys, content, message):
    f = tmp_path / "broken.py"
    f.write_bytes(content)
    assert main([str(f)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and "broken.py" in err


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="the running Python reads 3.12 syntax")
def test_newer_python_syntax_names_the_python_to_run(tmp_path, capsys):
    f = tmp_path / "generic.py"
    f.write_text("type Pair = tuple[int, int]\n\ndef first[T](xs: list[T]) -> T:\n    return xs[0]\n")
    assert main([str(f)]) == 2
    err = capsys.readouterr().err
    assert "cannot parse" in err and "run txnsafety lint under the project's Python" in err
    assert "Traceback" not in err


def test_broken_file_gets_no_newer_python_hint(tmp_path, capsys):
    f = tmp_path / "broken.py"
    f.write_text("def f(:\n    pass\n")
    assert main([str(f)]) == 2
    assert "project's Python" not in capsys.readouterr().err


def test_empty_and_huge_files(tmp_path, capsys):
    empty = tmp_path / "empty.py"
    empty.write_text("")
    assert main([str(empty)]) == 0
    assert main([str(empty), "--verbose"]) == 0
    assert "empty file" in capsys.readouterr().err
    huge = tmp_path / "huge.py"
    huge.write_text("x = 1\n" * 400_000)
    assert main([str(huge)]) == 2
    assert "larger than" in capsys.readouterr().err


def test_deeply_nested_code_gives_no_traceback(tmp_path, capsys):
    f = tmp_path / "deep.py"
    f.write_text("from django.db import transaction\nx = " + "(" * 5000 + "1" + ")" * 5000 + "\n")
    status = main([str(f)])
    assert status in (0, 2)
    assert "Traceback" not in capsys.readouterr().err


def test_missing_path(tmp_path, capsys):
    assert main([str(tmp_path / "nope.py")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_python_dash_m_and_console_command(tree):
    proc = subprocess.run([sys.executable, "-m", "txnsafety_lint", str(tree), "--format", "json"],
                          capture_output=True, text=True)
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)[0]["code"] == "TXN101"
    proc = subprocess.run([sys.executable, "-m", "txnsafety.cli", "lint", str(tree)],
                          capture_output=True, text=True)
    if "No module named" in proc.stderr:  # pragma: no cover - cli.py has no __main__ guard
        pytest.skip("txnsafety.cli is not runnable with -m")
    assert proc.returncode == 1 and "TXN101" in proc.stdout


def test_form_feed_is_not_a_line_break(tmp_path, capsys):
    """Python takes a form feed (^L, old GNU style) for whitespace: the lines after one keep
    their numbers, their functions are analysed and their noqa comments apply."""
    src = BAD.replace("\n\n\ndef", "\n\x0c\n\ndef")
    (tmp_path / "ff.py").write_text(src)
    assert main([str(tmp_path / "ff.py")]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"{tmp_path / 'ff.py'}:9:9: TXN101 "), out
    (tmp_path / "ff.py").write_text(src.replace("account.save()", "account.save()  # noqa: TXN101"))
    assert main([str(tmp_path / "ff.py")]) == 0
    src = "class A:\n\x0c\x0c pass\ndef A(): pass\n"          # found by test_fuzz

    class Open(Prefilter):
        def module_relevant(self, text):
            return True

        def function_relevant(self, text):
            return True

    assert ModuleAnalyzer(src, None, Config(), "ff.py", Open(Config()), RULES).run() == []
