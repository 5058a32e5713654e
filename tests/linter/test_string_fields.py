"""TXN106 is about numeric counters: an obviously non-numeric `+=` is a derived change."""
from __future__ import annotations

import textwrap

import pytest

from txnsafety_lint.analysis import analyze_source
from txnsafety_lint.facts.config import Config

HEAD = "from django.db import transaction\nfrom shop.models import M\n\n\n"


def found(body, **cfg):
    src = HEAD + textwrap.dedent(body)
    return [(f.line - HEAD.count("\n"), f.code)
            for f in analyze_source(src, Config().update(cfg) if cfg else Config())]


@pytest.mark.parametrize("change", [
    'm.name += "x"',
    "m.name += 'x'",
    'm.name += f"{suffix}!"',
    'm.name += "a" "b"',
    'm.name += "-" + suffix',
    'm.name += "%s" % suffix',
    'm.name += "{}".format(suffix)',
    'm.name += ", ".join(parts)',
    "m.name += str(suffix)",
    'm.name = m.name + "suffix"',
    'm.name = "prefix" + m.name',
    'm.name = m.name + f"{suffix}"',
    "m.tags += [suffix]",
    "m.tags = m.tags + (suffix,)",
])
def test_string_or_sequence_change_is_not_a_counter(change):
    body = f"""
        def f(pk, suffix, parts):
            m = M.objects.get(pk=pk)
            {change}
            m.save(update_fields=["name", "tags"])
        """
    assert found(body) == [(5, "TXN102")]


@pytest.mark.parametrize("change", ["m.n += 1", "m.n -= amount", "m.n += amount",
                                    "m.n = m.n + 1", "m.n = amount + m.n", "m.n = m.n - 1.5"])
def test_numeric_and_unknown_operands_stay_counters(change):
    body = f"""
        def f(pk, amount):
            m = M.objects.get(pk=pk)
            {change}
            m.save()
        """
    assert found(body) == [(5, "TXN106")]


def test_string_append_in_a_weak_transaction_is_txn109_not_txn106():
    body = """
        def f(pk):
            with transaction.atomic():
                m = M.objects.get(pk=pk)
                m.name += "x"
                m.save()
        """
    assert found(body) == []                             # TXN109 is opt-in
    assert found(body, enable="TXN109") == [(6, "TXN109")]
    counter = body.replace('m.name += "x"', "m.n += 1")
    assert found(counter) == [(6, "TXN106")]


def test_string_append_half_protected_is_txn101():
    assert found("""
        def f(pk):
            m = M.objects.get(pk=pk)
            with transaction.atomic():
                m.name += "x"
                m.save()
        """) == [(6, "TXN101")]


def test_message_does_not_call_a_string_a_counter():
    src = HEAD + textwrap.dedent("""
        def f(pk):
            m = M.objects.get(pk=pk)
            m.name += "x"
            m.save()
        """)
    (finding,) = analyze_source(src)
    assert finding.code == "TXN102"
    assert "counter" not in finding.message and "(name)" in finding.message
