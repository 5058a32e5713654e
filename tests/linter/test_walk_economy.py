"""What keeps the linter cheap on a large codebase, pinned so that a change cannot
quietly bring the cost back (bench_linter measures it; these say the mechanism is there).

* ``tree_nodes.py`` finds what the per-file facts need in one walk of the statements: the
  same nodes, in the same order, as a filter over ``ast.walk``.
* A method that reads nothing itself is a loader (walked when a caller asks for what it
  returns) only when it calls something that may hand out a row.
"""
from __future__ import annotations

import ast
import glob
import os
import textwrap

import django

from txnsafety_lint.analysis import RULES, ModuleAnalyzer, Prefilter
from txnsafety_lint.facts.config import Config
from txnsafety_lint.facts.tree_nodes import tree_nodes

KINDS = {"classes": (ast.ClassDef,), "functions": (ast.FunctionDef, ast.AsyncFunctionDef),
         "withs": (ast.With, ast.AsyncWith), "returns": (ast.Return,)}


def test_the_statement_walk_finds_what_a_full_walk_finds_in_its_order():
    # Django's own source: nested classes and functions, try/except, with, match-free code
    files = sorted(glob.glob(os.path.join(os.path.dirname(django.__file__), "db", "**", "*.py"),
                             recursive=True))
    assert len(files) > 50
    for path in files:
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
        every = list(ast.walk(tree))
        found = tree_nodes(tree)
        for attr, kinds in KINDS.items():
            assert list(getattr(found, attr)) == [n for n in every if isinstance(n, kinds)], (path, attr)


def test_statements_under_except_and_match_are_found():
    tree = ast.parse(textwrap.dedent("""\
        try:
            pass
        except ValueError:
            def in_handler():
                return 1
        match x:
            case 1:
                class InCase:
                    pass
        """))
    found = tree_nodes(tree)
    assert [f.name for f in found.functions] == ["in_handler"]
    assert [c.name for c in found.classes] == ["InCase"]
    assert len(found.returns) == 1


VIEW = textwrap.dedent("""\
    from app.models import Device, Account


    class VerifyView:
        def load(self, pk):
            return Device.objects.get(pk=pk)

        def title(self, user):
            return "Verify " + str(user)

        def chosen(self, pk):
            device = self.load(pk)
            return device

        def post(self, pk, user):
            label = self.title(user)
            device = self.chosen(pk)
            account = Account.objects.get(pk=pk)
            account.note = label
            account.save()
            device.last = device.last + 1
            device.save()
        """)


def _walked(source: str) -> set[str]:
    """Names of the functions of ``source`` the analysis walked with libcst."""
    cfg = Config()
    m = ModuleAnalyzer(source, ast.parse(source), cfg, "views.py", Prefilter(cfg), RULES)
    findings = m.run()
    assert sorted(f.code for f in findings) == ["TXN102", "TXN106"]   # the device's counter too
    return {fnode.name for fnode, _cls in m.info.functions if m.analyzed.get(id(fnode)) is not None}


def test_a_method_that_reads_nothing_and_calls_no_loader_is_not_walked_for_its_callers():
    walked = _walked(VIEW)
    assert "title" not in walked               # returns a string it built: nothing to hand out
    assert {"post", "chosen", "load"} <= walked  # chosen hands on what self.load() read
