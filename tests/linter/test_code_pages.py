"""``txnsafety codes TXN102`` prints the page offline, from a checkout and from a wheel."""
from __future__ import annotations

import subprocess
import sys
import zipfile

import pytest

from txnsafety.cli import main
from txnsafety.code_pages import page
from txnsafety.codes import CODES

from .helpers import ROOT
from .test_precommit import _copy_tree


def test_codes_lists_all(capsys):
    assert main(["codes"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out] == list(CODES)


@pytest.mark.parametrize("code", sorted(CODES))
def test_codes_prints_the_page(code, capsys):
    assert main(["codes", code.lower()]) == 0
    assert capsys.readouterr().out == (ROOT / "docs" / "codes" / f"{code}.md").read_text()
    assert page(code) == (ROOT / "docs" / "codes" / f"{code}.md").read_text()


def test_unknown_code(capsys):
    assert main(["codes", "TXN999"]) == 2
    err = capsys.readouterr().err
    assert "TXN999: unknown code" in err and "TXN101" in err


def test_wheel_ships_the_pages(tmp_path):
    # built from a copy of the tree: pip builds in place, and a build/ left by an earlier
    # build would still hold the pages even if the build step stopped copying them
    source = tmp_path / "src"
    _copy_tree(source)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                           "-q", "-w", str(tmp_path), str(source)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    wheel = next(tmp_path.glob("txnsafety-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        for code in CODES:
            name = f"txnsafety/code_pages/{code}.md"
            assert name in names, name
            assert zf.read(name).decode() == (ROOT / "docs" / "codes" / f"{code}.md").read_text()
        assert "txnsafety/code_pages.py" in names
    # installed from the wheel alone (no checkout beside it), the command prints the page
    target = tmp_path / "site"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(target)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import txnsafety.code_pages as p; "
            "assert str(p.pages_dir()).startswith(sys.argv[1]), p.pages_dir(); "
            "from txnsafety.cli import main; sys.exit(main(['codes', 'TXN102']))")
    proc = subprocess.run([sys.executable, "-c", code, str(target)], capture_output=True,
                          text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("# TXN102")
