"""The rule registry is the one place a code starts from: every entry's parts exist.

A code the linter reports has a registry entry whose page exists, whose eval files exist and
mark it, and whose ``decided_in`` names code that exists and mentions the code (so a grep for
the code lands on its judgement). The configuration, SARIF rules and docs table agree with it.
"""
from __future__ import annotations

import importlib
import inspect
import json
import re
from pathlib import Path

import pytest

from txnsafety.codes import CODES
from txnsafety_lint.facts.config import LINTER_CODES, OPT_IN_CODES
from txnsafety_lint.report.formats import sarif
from txnsafety_lint.rules.registry import RULES, Default

REPO = Path(__file__).resolve().parents[2]


def _decider(where: str):
    module, _, qualname = where.partition(":")
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


@pytest.mark.parametrize("code", sorted(RULES))
def test_each_rule_has_its_page_examples_and_judging_code(code):
    rule = RULES[code]
    assert rule.code == code and rule.meta is CODES[code]
    assert (REPO / rule.page).is_file(), rule.page
    for example in rule.examples:
        text = (REPO / "fixtures" / "lint" / example).read_text(encoding="utf-8")
        assert re.search(rf"# expect: .*{code}", text), f"{example} marks no {code}"
    decider = _decider(rule.decided_in)
    source = inspect.getsource(inspect.getmodule(decider))
    assert code in source, f"{rule.decided_in}'s module never names {code}"


def test_configuration_and_sarif_derive_from_the_registry():
    assert LINTER_CODES == tuple(RULES)
    assert OPT_IN_CODES == {c for c, r in RULES.items() if r.default is Default.OPT_IN}
    rules = json.loads(sarif([]))["runs"][0]["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == list(RULES)
    assert {r["id"] for r in rules if not r["defaultConfiguration"]["enabled"]} == OPT_IN_CODES


def test_runtime_only_codes_have_no_rule_and_the_docs_table_lists_the_rest():
    assert set(CODES) - set(RULES) == {"TXN110", "TXN111", "TXN112"}
    table = (REPO / "docs" / "linter.md").read_text(encoding="utf-8")
    listed = re.findall(r"^\| \[(TXN\d+)\]\(codes/", table, flags=re.M)
    assert listed[:len(RULES)] == list(RULES)
    for code, rule in RULES.items():
        row = next(line for line in table.splitlines() if line.startswith(f"| [{code}]"))
        assert ("opt-in" in row) == (rule.default is Default.OPT_IN), row
