"""The stomp lab's handlers (fixtures/stomp_lab) as the linter sees them.

Every ``*_racy`` handler carries exactly one finding, of its stomping class (the two
counter handlers, ``top_up_racy`` and ``sell_item_racy``, are the lost-update counter
shape, which the linter reports as the more specific TXN106: see docs/codes/TXN106.md);
every fixed twin carries none.  Findings are matched to handlers by function, not by line,
so the fixture can move.
"""
from __future__ import annotations

import ast

import pytest

from txnsafety_lint.cli import main

from .helpers import ROOT

LAB = ROOT / "fixtures" / "stomp_lab"
ENDPOINTS = LAB / "endpoints.py"

pytestmark = pytest.mark.skipif(not ENDPOINTS.exists(), reason="fixtures/stomp_lab not present")

#: handler -> the codes the linter must report in it (and nothing else)
EXPECTED = {
    "earn_points_racy": ["TXN101"],
    "earn_points_fixed": [],
    "top_up_racy": ["TXN106"],          # class TXN102; a counter, so TXN106
    "top_up_fixed": [],
    "buy_coffee_racy": ["TXN103"],
    "buy_coffee_fixed": [],
    "sell_item_racy": ["TXN106"],       # class TXN109; a counter, so TXN106 (TXN109 is opt-in)
    "sell_item_atomic": [],
    "sell_item_versioned": [],
    "redeem_voucher_racy": ["TXN105"],
    "redeem_voucher_fixed": [],
}


def by_function(lines: list[str]) -> dict[str, list[str]]:
    tree = ast.parse(ENDPOINTS.read_text(encoding="utf-8"))
    spans = [(node.lineno, node.end_lineno, node.name) for node in tree.body
             if isinstance(node, ast.FunctionDef)]
    out: dict[str, list[str]] = {}
    for text in lines:
        path, line, _col, rest = text.split(":", 3)
        assert path.endswith("endpoints.py"), text
        code = rest.split()[0]
        owner = next((name for lo, hi, name in spans if lo <= int(line) <= hi), "<module>")
        out.setdefault(owner, []).append(code)
    return out


def lint(capsys, *args: str) -> dict[str, list[str]]:
    # the lab lives under fixtures/, which the linter takes for test fixtures: ask for it
    main([str(LAB), "--format", "text", "--include-tests", *args])
    return by_function(capsys.readouterr().out.splitlines())


def test_every_handler_has_exactly_its_class_finding(capsys):
    got = lint(capsys)
    for handler, codes in EXPECTED.items():
        assert got.get(handler, []) == codes, (handler, got)
    assert set(got) <= set(EXPECTED), got


def test_versioned_model_imported_from_models_module(capsys):
    """``VersionedItem`` is declared in models.py (``version_id_col``) and imported with
    ``from .models import ...``: its read-modify-write is a conditional UPDATE."""
    assert lint(capsys).get("sell_item_versioned", []) == []


def test_no_cross_module_judges_the_file_alone(capsys, tmp_path):
    """Each file on its own: the model's version column is in another file, so the
    versioned handler is judged as a plain counter, as flake8 (one file) judges it.
    (An empty configuration: the repository's own pyproject.toml lists the model in
    ``versioned-models`` for exactly that reason.)"""
    cfg = tmp_path / "pyproject.toml"
    cfg.write_text("[tool.txnsafety]\n")
    got = lint(capsys, "--no-cross-module", "--config", str(cfg))
    assert got.get("sell_item_versioned") == ["TXN106"]
    assert got.get("earn_points_racy") == ["TXN101"]        # a helper of the same module


def test_no_cross_module_with_configured_versioned_model(capsys, tmp_path):
    cfg = tmp_path / "pyproject.toml"
    cfg.write_text('[tool.txnsafety]\nversioned-models = ["VersionedItem"]\n')
    got = lint(capsys, "--no-cross-module", "--config", str(cfg))
    assert got.get("sell_item_versioned", []) == []
