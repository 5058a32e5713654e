"""The demo's verdict: what makes ``txnsafety demo`` exit 1."""
from __future__ import annotations

from collections import Counter

from txnsafety.demo.load import Outcome
from txnsafety.demo.static import StaticFinding
from txnsafety.demo.summary import verdict
from txnsafety_lab.catalog import CLASSES, find


def clean_outcomes(server="wsgi"):
    """Every racy variant lost one write and was reported; every fix is clean."""
    out = []
    for c in CLASSES:
        for v in c.variants:
            o = Outcome(server, c.slug, v.name, 10, 0, v.expected(10),
                        v.expected(10) - (v.unit if v.racy and c.damage == "lost" else 0)
                        + (1 if v.racy and c.damage == "duplicated" else 0), 0.1, v.unit)
            if v.racy:
                o.codes = Counter({c.code: 10})
            out.append(o)
    return out


def test_clean_run_is_ok():
    result = verdict(CLASSES, clean_outcomes(), [])
    assert result == {"ok": True, "problems": [], "notes": []}


def test_a_fixed_twin_that_loses_a_write_fails_the_run():
    outcomes = clean_outcomes()
    fix = next(o for o in outcomes if o.class_slug == "half-protected" and o.variant == "for-update")
    fix.stored -= 1
    result = verdict(CLASSES, outcomes, [])
    assert not result["ok"] and result["problems"] == ["half-protected / for-update on WSGI: 1 writes lost"]


def test_a_reported_or_flagged_or_failing_fixed_twin_fails_the_run():
    outcomes = clean_outcomes()
    fix = next(o for o in outcomes if o.variant == "atomic")
    fix.codes = Counter({"TXN109": 2})
    user_lock = next(o for o in outcomes if o.variant == "user-lock")
    user_lock.failed = 3
    flagged = StaticFinding("endpoints.py", 1, 1, "TXN106", "m", find("weak-isolation").fixes[1].function)
    result = verdict(CLASSES, outcomes, [flagged])
    assert not result["ok"]
    assert result["problems"] == [
        "unprotected / user-lock on WSGI: 3 of 10 requests failed",
        "weak-isolation / atomic on WSGI: reported by the checker (TXN109 x2)",
        "weak-isolation / version-column: flagged by the linter (TXN106)",
    ]


def test_a_racy_endpoint_that_lost_nothing_is_a_note_not_a_failure():
    outcomes = clean_outcomes()
    racy = next(o for o in outcomes if o.class_slug == "unprotected" and o.variant == "racy")
    racy.stored = racy.expected
    result = verdict(CLASSES, outcomes, [])
    assert result["ok"] and result["notes"] == [
        "unprotected / racy on WSGI: no write lost this time "
        "(a race is a matter of timing: run again, or raise --think-ms)"]
