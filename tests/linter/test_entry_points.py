"""Every entry point reports the same findings for a file (issue 14, item 4).

A real project tree (git work tree, ``[tool.txnsafety]``) whose findings need facts from other
modules: a loader helper in ``loaders.py`` whose row ``views.py`` writes, a transaction
wrapper declared in ``txn.py`` and used in ``views.py``, a unique key declared in
``models.py`` that settles a check-then-insert in ``views.py``.  ``txnsafety lint .``,
``txnsafety lint FILE``, real ``flake8`` on each file and a real ``pre-commit try-repo`` on a
subset of files must agree file by file, through the on-disk index (``.txnsafety_cache``)
cold, warm, corrupt or switched off.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

from txnsafety_lint.analysis import file_facts, project_config
from txnsafety_lint.cli import main
from txnsafety_lint.facts.config import Config
from txnsafety_lint.project.index import CACHE_DIR, INDEX_FILE
from txnsafety_lint.facts.wrappers import with_wrappers

from .helpers import ROOT
from .test_precommit import _git, _hookrepo

FILES = {
    "pyproject.toml": "[tool.txnsafety]\n",
    "shop/__init__.py": "",
    "shop/models.py": """\
        from django.db import models


        class Account(models.Model):
            balance = models.IntegerField(default=0)


        class Coupon(models.Model):
            code = models.CharField(max_length=20, unique=True)
            owner = models.IntegerField()
        """,
    "shop/loaders.py": """\
        from .models import Account


        def load_account(pk):
            return Account.objects.get(pk=pk)
        """,
    "shop/txn.py": """\
        import contextlib

        from django.db import transaction


        @contextlib.contextmanager
        def unit_of_work():
            with transaction.atomic():
                yield
        """,
    "shop/views.py": """\
        from .loaders import load_account
        from .models import Account, Coupon
        from .txn import unit_of_work


        def pay(pk, amount):
            account = load_account(pk)
            account.balance -= amount
            account.save()


        def refund(pk, amount):
            account = Account.objects.get(pk=pk)
            with unit_of_work():
                account.balance += amount
                account.save()


        def claim(code, owner):
            if not Coupon.objects.filter(code=code).exists():
                Coupon.objects.create(code=code, owner=owner)
        """,
    "shop/reports.py": """\
        from .models import Account


        def close(pk):
            account = Account.objects.get(pk=pk)
            account.balance -= 5
            account.save()  # noqa: TXN106
        """,
}
PY_FILES = sorted(p for p in FILES if p.endswith(".py"))
#: what only the project shows: the loader's row (TXN106 at 9), the wrapper (TXN101, not
#: TXN106, at 16), the unique key (no TXN105 at 21)
EXPECTED_VIEWS = ["shop/views.py:9:5: TXN106", "shop/views.py:16:9: TXN101"]
FINDING = re.compile(r"^(\S+?\.py):(\d+):(\d+): (TXN\d+)")


def make_project(tmp_path):
    root = tmp_path / "project"
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    _git("init", "-q", cwd=root)
    _git("add", "-A", cwd=root)
    past = time.time() - 100           # older than the index's "racy" window
    for rel in FILES:
        os.utime(root / rel, (past, past))
    return root


def findings(text: str) -> dict[str, list[str]]:
    """``path:line:col: CODE`` per file, from any of the outputs (flake8 adds ``./``)."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        m = FINDING.match(line.strip())
        if m:
            path = m.group(1).removeprefix("./")
            out.setdefault(path, []).append(f"{path}:{m.group(2)}:{m.group(3)}: {m.group(4)}")
    return {k: sorted(v, key=lambda t: [int(n) if n.isdigit() else n for n in t.split(":")])
            for k, v in out.items()}


def run(cmd, cwd, **kw):
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600, **kw)
    return proc.returncode, proc.stdout, proc.stderr


def lint(root, *args):
    return run([sys.executable, "-m", "txnsafety_lint", *args], root)


def flake8(root, path, *args):
    return run([sys.executable, "-m", "flake8", "--select", "TXN", *args, path], root)


def test_lint_flake8_and_lint_file_agree_file_by_file(tmp_path):
    root = make_project(tmp_path)
    # flake8 first, one file per process: the first run builds the index (cold)
    by_flake8: dict[str, list[str]] = {}
    for rel in PY_FILES:
        status, out, err = flake8(root, rel)
        assert status in (0, 1) and "Traceback" not in err, err
        by_flake8.update(findings(out))
    assert (root / CACHE_DIR / INDEX_FILE).is_file()
    shutil.rmtree(root / CACHE_DIR)
    status, out, err = lint(root, ".")
    assert status == 1, out + err
    whole = findings(out)
    assert whole["shop/views.py"] == EXPECTED_VIEWS
    # the project's facts matter: each file alone is judged differently
    _status, alone, _err = lint(root, ".", "--no-cross-module")
    assert findings(alone) != whole
    assert by_flake8 == whole
    for rel in PY_FILES:
        _status, out, _err = lint(root, rel)
        assert findings(out).get(rel, []) == whole.get(rel, []), rel
        _status, out, _err = flake8(root, rel, "--txn-cache=false")
        assert findings(out).get(rel, []) == whole.get(rel, []), rel


def test_flake8_applies_noqa_itself(tmp_path):
    """The index keeps what ``# noqa`` silences: flake8 ``--disable-noqa`` still shows it."""
    root = make_project(tmp_path)
    _status, out, _err = flake8(root, "shop/reports.py")
    assert "TXN106" not in out
    _status, out, _err = flake8(root, "shop/reports.py", "--disable-noqa")
    assert "shop/reports.py:7:5: TXN106" in out


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_pre_commit_on_changed_files_reports_what_lint_dot_reports(tmp_path):
    root = make_project(tmp_path)
    _status, out, _err = lint(root, ".", "--no-cache")
    whole = findings(out)
    assert not (root / CACHE_DIR).exists()          # --no-cache writes nothing
    hookrepo = _hookrepo(tmp_path)
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home")}
    cmd = [sys.executable, "-m", "pre_commit", "try-repo", str(hookrepo), "txnsafety-lint",
           "--files", "shop/views.py", "shop/txn.py"]
    status, out, err = run(cmd, root, env=env)
    assert status == 1, out + err
    assert findings(out) == {"shop/views.py": whole["shop/views.py"]}, out
    assert findings(out)["shop/views.py"] == EXPECTED_VIEWS


def _index_note(err: str) -> tuple[int, str]:
    m = re.search(r"index \.txnsafety_cache: \d+ file\(s\), (\d+) read again, project "
                  r"analysis (\w+)", err)
    assert m, err
    return int(m.group(1)), m.group(2)


def test_warm_run_reads_only_changed_files(tmp_path, capsys):
    root = make_project(tmp_path)
    views = str(root / "shop" / "views.py")
    assert main([views, "-v"]) == 1
    cap = capsys.readouterr()
    assert _index_note(cap.err) == (len(PY_FILES), "computed")
    assert findings(cap.out)["shop/views.py"] == EXPECTED_VIEWS
    assert main([views, "-v"]) == 1
    assert _index_note(capsys.readouterr().err) == (0, "reused")
    # a changed file: read again, the project analysed again, the new finding reported
    txn = root / "shop" / "txn.py"
    txn.write_text(txn.read_text().replace("transaction.atomic()", "contextlib.nullcontext()"))
    past = time.time() - 50
    os.utime(txn, (past, past))
    assert main([views, "-v"]) == 1
    cap = capsys.readouterr()
    assert _index_note(cap.err) == (1, "computed")
    assert "shop/views.py:16:9: TXN106" in cap.out          # no longer a transaction
    # the wrappers and unique keys of models, loaders, views and reports come from the index,
    # txn.py's anew (the empty __init__.py has none)
    assert "facts of 4 unchanged file(s) from the index" in cap.err, cap.err
    # touched, not changed: read again, the stored analysis reused
    os.utime(txn, (past + 10, past + 10))
    assert main([views, "-v"]) == 1
    assert _index_note(capsys.readouterr().err) == (1, "reused")


@pytest.mark.parametrize("damage", [b"\x00garbage{", b'{"format": 1, "linter": 7}',
                                    "same linter, broken entries"])
def test_a_corrupt_index_is_rebuilt(tmp_path, capsys, damage):
    root = make_project(tmp_path)
    assert main([str(root)]) == 1
    expected = findings(capsys.readouterr().out)
    index = root / CACHE_DIR / INDEX_FILE
    if isinstance(damage, str):
        data = json.loads(index.read_text())
        data["files"] = {"shop/views.py": "x"}
        index.write_text(json.dumps(data))
    else:
        index.write_bytes(damage)
    assert main([str(root / "shop" / "views.py")]) == 1
    cap = capsys.readouterr()
    assert findings(cap.out) == {"shop/views.py": expected["shop/views.py"]}
    if isinstance(damage, str) or damage.startswith(b"\x00"):
        assert "txnsafety: index:" in cap.err and "rebuilding it" in cap.err, cap.err
    assert "Traceback" not in cap.err
    json.loads(index.read_text())                            # written anew
    assert main([str(root / "shop" / "views.py"), "-v"]) == 1
    assert _index_note(capsys.readouterr().err) == (0, "reused")


def test_an_unwritable_index_does_not_break_the_run(tmp_path, capsys):
    root = make_project(tmp_path)
    (root / CACHE_DIR).write_text("a file where the folder should be")
    assert main([str(root / "shop" / "views.py")]) == 1
    cap = capsys.readouterr()
    assert findings(cap.out)["shop/views.py"] == EXPECTED_VIEWS
    assert "txnsafety: index: cannot write .txnsafety_cache" in cap.err, cap.err
    status, out, err = flake8(root, "shop/views.py")
    assert findings(out)["shop/views.py"] == EXPECTED_VIEWS, out + err
    assert "Traceback" not in err


def test_the_index_is_ignored_by_git_and_keyed_by_the_linter(tmp_path, capsys):
    root = make_project(tmp_path)
    assert main([str(root)]) == 1
    capsys.readouterr()
    listed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"],
                            cwd=root, capture_output=True, text=True, check=True).stdout
    assert CACHE_DIR not in listed
    index = root / CACHE_DIR / INDEX_FILE
    data = json.loads(index.read_text())
    data["linter"] = "another version"
    index.write_text(json.dumps(data))
    assert main([str(root), "-v"]) == 1
    assert _index_note(capsys.readouterr().err) == (len(PY_FILES), "computed")


def test_parallel_runs_share_one_index(tmp_path):
    """Runs at the same time (flake8's worker processes, two commands) take the index's lock
    in turn: every one reports the project's findings and the index is whole afterwards."""
    root = make_project(tmp_path)
    _status, out, _err = lint(root, ".", "--no-cache")
    whole = findings(out)
    procs = [subprocess.Popen([sys.executable, "-m", "flake8", "--select", "TXN", "-j", "2",
                               *PY_FILES], cwd=root, stdout=subprocess.PIPE, text=True),
             subprocess.Popen([sys.executable, "-m", "txnsafety_lint", "shop/views.py"],
                              cwd=root, stdout=subprocess.PIPE, text=True),
             subprocess.Popen([sys.executable, "-m", "txnsafety_lint", "."],
                              cwd=root, stdout=subprocess.PIPE, text=True)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert findings(outs[0]) == whole
    assert findings(outs[1]) == {"shop/views.py": whole["shop/views.py"]}
    assert findings(outs[2]) == whole
    data = json.loads((root / CACHE_DIR / INDEX_FILE).read_text())
    assert sorted(data["files"]) == PY_FILES


def test_per_file_facts_make_the_project_configuration(tmp_path):
    """The index keeps wrappers and unique keys per file (analysis.FileFacts); merged, they
    must be exactly what ``with_wrappers`` finds over the whole project, or the index would
    judge differently from a run without it."""
    root = make_project(tmp_path)
    paths = sorted((ROOT / "fixtures").rglob("*.py")) + [root / p for p in PY_FILES]
    sources = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        try:
            sources.append((text, __import__("ast").parse(text)))
        except SyntaxError:
            continue
    for cfg in (Config(), Config(locks={"my_lock"}, transactions={"unit_of_work"})):
        whole = with_wrappers(cfg, sources)
        merged = project_config(cfg, [file_facts(text, tree, cfg) for text, tree in sources])
        assert whole.transactions - cfg.transactions and whole.unique_keys   # not trivial
        assert merged == whole
        assert list(merged.unique_keys["Coupon"]) == list(whole.unique_keys["Coupon"])
        assert whole.relations["Profile"] >= {"languages", "members"}    # relations.py


def test_file_facts_survive_the_index():
    """What the index writes of a file's facts reads back the same (relations included)."""
    from txnsafety_lint.project.index import _facts_in, _facts_out
    path = ROOT / "fixtures" / "lint" / "django_value_provenance.py"
    text = path.read_text(encoding="utf-8")
    facts = file_facts(text, __import__("ast").parse(text), Config())
    assert dict(facts.relations)["Profile"] == {"languages", "members"}
    assert _facts_in(json.loads(json.dumps(_facts_out(facts)))) == facts


def test_the_index_is_keyed_by_every_module_of_the_linter():
    """A changed rule, fact or flow module makes a new linter: the stored findings are not reused
    (they were, for every module outside ``linter/project/``, once the index moved there)."""
    import txnsafety_lint
    from txnsafety_lint.project import index

    package = os.path.dirname(os.path.abspath(txnsafety_lint.__file__))
    every = {os.path.join(d, n) for d, _dirs, names in os.walk(package) for n in names
             if n.endswith(".py") and "__pycache__" not in d}
    assert every <= set(index.fingerprinted_sources())
    assert os.path.join(package, "rules", "check_then_act.py") in every
