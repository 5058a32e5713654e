"""txnsafety/demo/timeline.py: which request a check-then-act's picture puts beside the reported one.

Events as the recorder writes them.  The racing insert can be flushed *before* the reported
request begins and committed after its check: the check still could not see it (a loaded run
showed it, and the report drew the reported request alone although the run made a duplicate).
"""
from __future__ import annotations

from txnsafety.demo.timeline import Event, race

MODEL = "txnsafety_lab.models.Coupon"


def _event(t: int, request: str, op: str, model: str = "", key: str = "") -> Event:
    return Event(t, request, op, model, key, 0, "endpoints.py:1 in redeem")


def _lanes(other_commit_at: int) -> list:
    events = [
        _event(1, "a", "begin"),
        _event(2, "a", "write", MODEL, "1"),        # A inserts (flushed, not committed)
        _event(3, "b", "begin"),                     # B begins and counts: A's row unseen
        _event(other_commit_at, "a", "commit"),
        _event(6, "b", "write", MODEL, "2"),        # B inserts the duplicate
        _event(7, "b", "commit"),
    ]
    return race(sorted(events, key=lambda e: e.t_ns), "b", MODEL, "2", internal=False, check_then_act=True)


def test_an_insert_flushed_before_the_check_but_committed_after_it_raced_it():
    lanes = _lanes(other_commit_at=5)
    assert [lane["request_id"] for lane in lanes] == ["b", "a"]


def test_an_insert_committed_before_the_request_began_did_not():
    lanes = _lanes(other_commit_at=2)
    assert [lane["request_id"] for lane in lanes] == ["b"]
