"""benchmarks/trace_lock_handoff.py: how one handoff is split into its steps.

The trace itself needs Redis and 16 processes (docs/performance.md); what is checked
here is the arithmetic that turns two processes' stamped cycles into the steps of the
handoff between them, on cycles written by hand with known times.
"""
from __future__ import annotations

import pytest

from benchmarks.trace_lock_handoff import jain, split


def _cycle(fence, pid, t_in, t_held, steps):
    # (fence, pid, t_enter, t_in, t_held, t_out, steps) as the worker records it
    return (fence, pid, 0.0, t_in, t_held, t_held + 0.5, steps)


def test_a_handoff_is_split_into_release_wake_and_api():
    holder = _cycle(1_000_000, 100, 0.0, 1.0, [("script>", -0.2), ("script<", -0.1),   # its own acquire
                                               ("script>", 1.01), ("script<", 1.30)])  # its release
    waiter = _cycle(1_001_450, 200, 1.45, 2.0, [("script>", 0.0), ("script<", 0.1),    # queued
                                                ("wait>", 0.1), ("wait<", 0.5),      # a recheck time-out
                                                ("wait>", 0.5), ("wait<", 1.4)])     # woken, claimed
    parts = split([waiter, holder])   # any order: sorted by fence (clock-based, not consecutive)
    got = {name: values[0] for name, values in parts.items()}
    assert got["hold (the sleep as it came out)"] == pytest.approx(1.0)
    assert got["API before RELEASE"] == pytest.approx(0.01)
    assert got["RELEASE round trip"] == pytest.approx(0.29)
    assert got["release sent -> waiter holds the claim's reply"] == pytest.approx(0.39)
    assert got["API after the grant"] == pytest.approx(0.05)
    assert got["handoff total (end of hold -> next holder runs)"] == pytest.approx(0.45)


def test_no_handoff_when_the_same_process_goes_again_or_the_wait_ended_before_the_release():
    steps = [("script>", 1.01), ("script<", 1.3), ("wait<", 1.4)]
    same = [_cycle(1, 100, 0.0, 1.0, steps), _cycle(2, 100, 1.45, 2.0, steps)]
    early = [_cycle(1, 100, 0.0, 1.0, steps), _cycle(3, 200, 1.45, 2.0, [("wait<", 0.9)])]
    assert not any(split(same).values()) and not any(split(early).values())


def test_jain_index():
    assert jain([5, 5, 5, 5]) == pytest.approx(1.0)
    assert jain([10, 0]) == pytest.approx(0.5)
