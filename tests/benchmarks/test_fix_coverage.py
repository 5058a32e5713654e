"""``benchmarks/fix_coverage.py``: the count per code of findings with a safe fix, an unsafe
fix or none, all of them and the judged TPs, on a small project made here (no network).

Each file holds one shape whose applicability docs/linter.md's Fixes section states: a
counter saved whole (safe), the same counter on a model whose ``save()`` is overridden
(unsafe), a ``select_for_update()`` read outside a transaction (safe), a read-modify-write
of a text field (the locked read: unsafe), two objects for one row (TXN103: none)."""
from __future__ import annotations

import collections
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

from corpus.entries import Judgment, Label  # noqa: E402
from fix_coverage import Coverage, PlannedFinding, fixer_table, planned, table  # noqa: E402

FILES = {
    "views.py": """\
        from shop.models import Article


        def view(pk):
            article = Article.objects.get(pk=pk)
            article.credits += 1
            article.save()
        """,
    "tally.py": """\
        from django.db import models


        class Tally(models.Model):
            def save(self, *args, **kwargs):
                super().save(*args, **kwargs)


        def bump(pk):
            tally = Tally.objects.get(pk=pk)
            tally.n += 1
            tally.save()
        """,
    "locks.py": """\
        from django.db import transaction
        from shop.models import Seat


        def hold(pk):
            seat = Seat.objects.select_for_update().get(pk=pk)
            seat.taken = True
            seat.save(update_fields=["taken"])
        """,
    "other.py": """\
        from shop.models import Shop


        def sign(pk, who):
            shop = Shop.objects.get(pk=pk)
            shop.bio = shop.bio + f"-- {who}"
            shop.save()
        """,
    "twice.py": """\
        from shop.models import Wallet


        def pay(pk):
            first = Wallet.objects.get(pk=pk)
            second = Wallet.objects.get(pk=pk)
            first.owner = "a"
            first.save()
            second.note = "b"
            second.save()
        """,
}


def line_of(name: str, text: str) -> int:
    """The line of ``name`` that holds ``text`` (where the finding is reported)."""
    lines = textwrap.dedent(FILES[name]).splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def judged(name: str, text: str, code: str, label: Label) -> tuple[tuple[str, int, str], Judgment]:
    key = (name, line_of(name, text), code)
    return key, Judgment(key[0], key[1], code, label, "made here")


@pytest.fixture
def project(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.txnsafety]\n")
    for name, text in FILES.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    return tmp_path


def counts(**grades: int) -> collections.Counter:
    return collections.Counter(grades)


def test_counts_each_code_by_applicability_and_writes_nothing(project):
    before = {p.name: p.read_bytes() for p in project.iterdir()}
    found = planned(project, timeout=300)
    judgments = dict([judged("views.py", "article.save()", "TXN106", Label.TP),
                      judged("tally.py", "tally.save()", "TXN106", Label.FP),
                      judged("other.py", "shop.save()", "TXN102", Label.TP),
                      judged("twice.py", "second.save()", "TXN103", Label.TP)])
    coverage = Coverage()
    coverage.add(found, judgments)           # the TXN108 in locks.py is left unjudged
    assert dict(coverage.everything) == {"TXN106": counts(safe=1, unsafe=1), "TXN108": counts(safe=1),
                                         "TXN102": counts(unsafe=1), "TXN103": counts(none=1)}
    assert dict(coverage.true_positives) == {"TXN106": counts(safe=1), "TXN102": counts(unsafe=1),
                                             "TXN103": counts(none=1)}
    assert coverage.unjudged == 1
    assert dict(coverage.by_fixer) == {"TXN106": counts(counters=2), "TXN108": counts(lock_scope=1),
                                       "TXN102": counts(locked_read=1)}
    assert {p.name: p.read_bytes() for p in project.iterdir()} == before   # planned, not applied


def test_table_rows_and_total():
    coverage = Coverage()
    coverage.add([PlannedFinding("a.py", 1, "TXN106", "safe"), PlannedFinding("a.py", 9, "TXN106", "none"),
                  PlannedFinding("b.py", 3, "TXN105", "unsafe")], {})
    out = table(coverage.everything, "All", markdown=True)
    assert "| TXN105 | 1 | 0 | 1 | 0 |" in out
    assert "| TXN106 | 2 | 1 | 0 | 1 |" in out
    assert out.rstrip().endswith("| total | 3 | 1 | 1 | 1 |")
    assert coverage.unjudged == 3 and not coverage.true_positives
    fixers = fixer_table({"TXN105": collections.Counter(sqla_insert=2)}, markdown=True)
    assert "| TXN105 | sqla_insert | 2 |" in fixers


def test_an_unknown_applicability_is_an_error_not_a_silent_column():
    with pytest.raises(ValueError, match="unknown applicability"):
        Coverage().add([PlannedFinding("a.py", 1, "TXN106", "maybe")], {})
