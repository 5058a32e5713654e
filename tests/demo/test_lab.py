"""The lab's handlers really lose writes when racy, and lose none when fixed, on both databases.

Racy variants run with a ``threading.Barrier`` as the handler's pause between
read and write, so every request has read before any writes: the loss is
deterministic (N-1 of N), not a matter of timing.  Fixed variants cannot use
that barrier (their pause is inside the lock or the transaction that
serialises them, so only one request would ever reach it); they run with real
overlap instead (a short pause, N threads released together) and must lose
nothing.  The checker runs in every request scope, as under the middleware.
"""
from __future__ import annotations

import threading
from collections import Counter

import pytest

from txnsafety.demo.load import Outcome
from txnsafety.scopes import close_request, open_request
from txnsafety_lab.catalog import CLASSES, find

N = 8


def run_concurrently(lab, handler, n=N):
    """``n`` threads, each one request scope running ``handler``; returns the errors raised."""
    start = threading.Barrier(n)
    errors: list[BaseException] = []

    def request() -> None:
        opened = open_request("POST", "/lab", {})
        assert opened is not None
        start.wait(30)
        try:
            handler(lab, 1)
        except Exception as exc:  # noqa: BLE001 - surfaced by the caller's assertion
            errors.append(exc)
        finally:
            close_request(*opened)

    threads = [threading.Thread(target=request) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return errors


def stored(lab, variant):
    with lab.measure.connect() as conn:
        return variant.stored(conn)


def damage(lab, variant, n=N):
    """Counted the way the demo counts it."""
    return Outcome("test", "", variant.name, n, 0, variant.expected(n), stored(lab, variant), 0.0, variant.unit).wrong


@pytest.mark.parametrize("slug", ["half-protected", "unprotected", "weak-isolation", "check-then-act"])
def test_racy_handler_loses_writes_between_concurrent_requests(lab, slug, txnsafety_violations):
    variant = find(slug).racy
    barrier = threading.Barrier(N)
    lab.pause_hook = lambda: barrier.wait(30)
    assert run_concurrently(lab, variant.handler) == []
    assert damage(lab, variant) == N - 1, f"{slug}: expected {N - 1} writes lost or duplicated"
    assert txnsafety_violations.codes() == [find(slug).code] * N   # check-then-act too, since TXN105 runs


def test_internal_stomp_needs_no_second_request(lab, txnsafety_violations):
    variant = find("internal").racy
    for _ in range(3):
        opened = open_request("POST", "/lab", {})
        try:
            variant.handler(lab, 1)
        finally:
            close_request(*opened)
    assert stored(lab, variant) == 3, "each request's bonus of 5 stamps was erased, its own stamp kept"
    assert damage(lab, variant, 3) == 3
    assert txnsafety_violations.codes() == ["TXN103"] * 3


@pytest.mark.parametrize("slug,name", [(c.slug, v.name) for c in CLASSES for v in c.fixes])
def test_fixed_twin_loses_nothing_and_is_not_reported(lab, slug, name, txnsafety_violations):
    variant = next(v for v in find(slug).fixes if v.name == name)
    lab.think = 0.003
    assert run_concurrently(lab, variant.handler) == []
    assert stored(lab, variant) == variant.expected(N)
    assert txnsafety_violations == []


def test_every_class_has_a_racy_handler_and_a_differently_named_fix():
    assert [c.code for c in CLASSES] == ["TXN101", "TXN102", "TXN103", "TXN109", "TXN105"]
    for stomp_class in CLASSES:
        assert stomp_class.racy.racy and stomp_class.fixes
        names = Counter(v.name for v in stomp_class.variants)
        assert max(names.values()) == 1
        assert all(v.cure for v in stomp_class.fixes)
