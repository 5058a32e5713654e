"""The flake8 plugin: registered as TXN, options, noqa."""
from __future__ import annotations

import ast
import subprocess
import sys
import textwrap

from txnsafety_lint.flake8_plugin import Plugin

SRC = textwrap.dedent("""\
    from django.db import transaction
    from shop.models import Account


    def withdraw(pk, amount):
        account = Account.objects.get(pk=pk)
        with transaction.atomic():
            account.balance -= amount
            account.save()


    def rename(uid, name):
        user = load_user(uid)
        user.name = user.name.strip() or name
        user.save()  # noqa: TXN102
    """)


def flake8(tmp_path, *args, src=SRC, cfg=None):
    (tmp_path / "app.py").write_text(src)
    if cfg is not None:
        (tmp_path / "setup.cfg").write_text(cfg)
    proc = subprocess.run([sys.executable, "-m", "flake8", "--select", "TXN", *args, "app.py"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.stdout


def test_plugin_runs_in_flake8(tmp_path):
    out = flake8(tmp_path)
    assert out.splitlines() == [
        "app.py:9:9: TXN101 half-protected: `account` read at line 6 outside any transaction or "
        "lock, saved at line 9 inside `transaction.atomic()` (line 7); move the read inside the "
        "block and lock the row with select_for_update()"]


def test_flake8_config_options_and_noqa(tmp_path):
    cfg = "[flake8]\ntxn-gets = load_user\n"
    out = flake8(tmp_path, cfg=cfg)
    assert "TXN102" not in out           # noqa: TXN102 honoured
    out = flake8(tmp_path, "--disable-noqa", cfg=cfg)
    assert "app.py:15:5: TXN102" in out


def test_opt_in_code_enabled_by_select(tmp_path):
    src = textwrap.dedent("""\
        from django.db import transaction
        from shop.models import Account


        def rename(pk, name):
            with transaction.atomic():
                account = Account.objects.get(pk=pk)
                account.owner = account.owner + " & " + name
                account.save()
        """)
    assert flake8(tmp_path, src=src) == ""
    assert "TXN109" in flake8(tmp_path, "--txn-enable", "TXN109", src=src)


def test_plugin_api_directly():
    tree = ast.parse(SRC)
    Plugin.parse_options(type("Options", (), {})())
    results = list(Plugin(tree, "app.py", SRC.splitlines(True)).run())
    assert [(r[0], r[2][:6]) for r in results] == [(9, "TXN101")]
    assert results[0][3] is Plugin


def test_plugin_survives_what_libcst_cannot_parse():
    src = "from django.db import transaction\n" + "x = " + "[" * 200 + "]" * 200 + "\n"
    assert list(Plugin(ast.parse(src), "x.py", src.splitlines(True)).run()) == []


def test_broken_pyproject_stops_flake8_with_one_line(tmp_path):
    """Never a traceback, and never findings judged under defaults nobody asked for."""
    (tmp_path / "pyproject.toml").write_text("[tool.txnsafety\n")
    (tmp_path / "app.py").write_text(SRC)
    proc = subprocess.run([sys.executable, "-m", "flake8", "--select", "TXN", "app.py"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert proc.stderr.startswith("txnsafety: configuration error: pyproject.toml: invalid TOML")


def test_pyproject_read_by_plugin(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.txnsafety]\ndisable = ["TXN101"]\n')
    assert "TXN101" not in flake8(tmp_path)
