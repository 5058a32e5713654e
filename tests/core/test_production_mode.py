"""The runtime codes on the generic data layer as production runs the checker:
``read_sites="adaptive"``, no model's sites wanted yet (tests/_production_mode.py).

The rest of the suite runs under the pytest plugin's ``read_sites="always"``, which locates
every read (txnsafety/stamps.py, checker.py).  Here each unsafe form must be reported with
exactly its codes and each safe twin not at all; a model's first report names no read
site, its later ones do (docs/production-mode.md).
"""
from __future__ import annotations

from collections.abc import Callable

import pytest

import txnsafety
from tests._production_mode import production_read_sites

from .conftest import Account, Country, Points
from .test_checker import _award, toy_lock


@pytest.fixture(autouse=True)
def production():
    with production_read_sites():
        yield


def _unprotected(store, safe: bool) -> None:
    with store.transaction() if safe else _nothing():
        acct = store.get(Account, 1)
        acct.balance += 5
        store.put(acct)


def _half_protected(store, safe: bool) -> None:
    with toy_lock(7) if safe else _nothing():
        pts = store.get(Points, 1)  # unsafe: read outside the lock it is written under
        with toy_lock(7) if not safe else _nothing():
            pts.points += 1
            store.put(pts)


def _internal(store, safe: bool) -> None:
    with store.transaction():
        if safe:
            _award(store, 5)
        acct = store.get(Account, 1)
        acct.balance += 10
        if not safe:
            _award(store, 5)  # nested get-modify-put of the same row
        store.put(acct)       # erases the +5 when it came after the read


def _scope_changed(store, safe: bool) -> None:
    with store.transaction():
        acct = store.get(Account, 1)
        if safe:
            acct.balance += 1
            store.put(acct)
    if not safe:
        with store.transaction():
            acct.balance += 1
            store.put(acct)


def _weak_isolation(store, safe: bool) -> None:
    with store.weak_transaction():
        acct = store.get(Account, 1)
        if safe:
            txnsafety.record_read(acct, key=1, for_update=True)  # re-read FOR UPDATE
        acct.balance += 1
        store.put(acct)


def _never_written(store, safe: bool) -> None:
    c = store.get(Country, 1)
    if not safe:
        with store.transaction():
            store.put(c)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


#: scenario -> the codes its unsafe form is reported with (its safe form: none).
SCENARIOS: dict[str, tuple[Callable[..., None], list[str]]] = {
    "unprotected": (_unprotected, ["TXN102"]),
    "half_protected": (_half_protected, ["TXN101"]),
    "internal": (_internal, ["TXN103"]),
    "scope_changed": (_scope_changed, ["TXN104"]),
    "weak_isolation": (_weak_isolation, ["TXN109"]),
    "never_written": (_never_written, ["TXN110"]),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_unsafe_form_is_reported_in_production(store, name, txnsafety_violations):
    scenario, codes = SCENARIOS[name]
    scenario(store, safe=False)
    assert txnsafety_violations.codes() == codes
    assert txnsafety_violations[0].write_site is not None
    assert txnsafety_violations[0].read_site is None  # production's path judged it: no site yet


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_safe_form_is_not_reported_in_production(store, name, txnsafety_violations):
    SCENARIOS[name][0](store, safe=True)
    assert txnsafety_violations == []


def test_a_repeated_violation_is_reported_again_once_with_its_read_site(store, txnsafety_violations):
    """Reports are told apart by their sites: the first names no read site, so the same
    violation again (its model's reads located now) is reported once more, with the site."""
    for _ in range(50):
        acct = store.get(Account, 1)
        store.put(acct)
    assert txnsafety_violations.codes() == ["TXN102", "TXN102"]
    first, second = txnsafety_violations
    assert first.read_site is None
    assert second.read_site.function == "test_a_repeated_violation_is_reported_again_once_with_its_read_site"
