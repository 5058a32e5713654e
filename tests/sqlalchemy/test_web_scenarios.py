"""Every scenario through a real web request, on SQLite and PostgreSQL, WSGI and ASGI.

The apps are ``fixtures/sqla_app``: Flask-SQLAlchemy under ``TxnSafetyMiddleware``
served by waitress, and a plain ASGI app on AsyncSession under
``TxnSafetyASGIMiddleware`` served by uvicorn; both driven over HTTP by httpx.
Each unsafe scenario must be reported with exactly its code; each safe twin must
not be reported at all.  Where the scenario loses an update, the database shows it.
"""
from __future__ import annotations

import pytest

from .conftest import is_pg

#: scenario -> codes reported by its unsafe form, on (SQLite, PostgreSQL).
UNSAFE = {
    "half_protected": (["TXN101"], ["TXN101"]),
    "unprotected": (["TXN102"], ["TXN102"]),
    "internal": (["TXN103"], ["TXN103"]),
    "scope_changed": (["TXN104"], ["TXN104"]),
    "weak_isolation": (["TXN109"], ["TXN109"]),
    "for_update_outside": (["TXN108"], ["TXN108"]),
    "versioned": (["TXN109"], ["TXN109"]),
}

#: scenario -> the variants that fix it, on (SQLite, PostgreSQL).
SAFE = {
    "half_protected": (["safe"], ["safe"]),
    "unprotected": (["safe"], ["safe"]),
    "internal": (["safe"], ["safe"]),
    "scope_changed": (["safe"], ["safe"]),
    # SQLite renders no FOR UPDATE: on the legacy driver mode it is no fix (see test below).
    "weak_isolation": (["safe", "atomic"], ["safe", "atomic", "for_update"]),
    "for_update_outside": (["safe"], ["safe"]),
    "versioned": (["safe"], ["safe"]),
    "bulk": (["unsafe"], ["unsafe"]),   # bulk/atomic UPDATEs have no unsafe form
}


def _expect(table: dict, name: str, url: str) -> list:
    return table[name][1 if is_pg(url) else 0]


@pytest.mark.parametrize("name", sorted(UNSAFE))
def test_unsafe_scenario_is_reported(web_app, name, txnsafety_violations):
    app = web_app
    response = app.post(f"/scenario/{name}", variant="unsafe")
    assert response.status_code == 200, response.text
    assert txnsafety_violations.codes() == _expect(UNSAFE, name, app.url)
    violation = txnsafety_violations[0]
    assert violation.model.endswith((".Account", ".Tally"))
    # On PostgreSQL TXN108 is reported for the statement (no key), before any row loads.
    assert violation.key == (None if name == "for_update_outside" and is_pg(app.url) else "1")
    site = violation.read_site if name == "for_update_outside" else violation.write_site
    assert site is not None and site.file.endswith(("scenarios.py", "asgi_app.py")), site
    if name == "internal":
        assert app.value("Tally")["n"] == 10          # the helper's +5 is lost
        assert violation.other_write_site.function == "_add_bonus"
    if name == "versioned":
        assert response.json() == {"conflict": False}
        assert app.value("Account")["balance"] == 101  # the concurrent +1000 is lost


@pytest.mark.parametrize("name", sorted(SAFE))
def test_safe_twin_is_not_reported(web_app, name, txnsafety_violations):
    app = web_app
    for variant in _expect(SAFE, name, app.url):
        response = app.post(f"/scenario/{name}", variant=variant)
        assert response.status_code == 200, (variant, response.text)
        assert txnsafety_violations.codes() == [], variant
        if name == "internal":
            assert app.value("Tally")["n"] == 15
        if name == "versioned":
            assert response.json() == {"conflict": True}   # StaleDataError: nothing lost
            assert app.value("Doc")["body"] == "theirs"


@pytest.mark.txnsafety_allow("asserts that raise mode fails the request at the write")
def test_raise_mode_fails_the_request_before_the_update(web_app):
    """In raise mode (the plugin's default) StompingError is raised inside the flush:
    the request fails and the lost update never reaches the database."""
    import txnsafety
    from txnsafety.pytest_plugin import ViolationLog
    app = web_app
    seen = ViolationLog()
    txnsafety.add_listener(seen.add)
    try:
        response = app.post("/scenario/weak_isolation", variant="unsafe")
    finally:
        txnsafety.remove_listener(seen.add)
    assert response.status_code == 500
    assert seen.codes() == ["TXN109"]
    assert app.value("Account")["balance"] == 100


def test_stale_lock(web_app, txnsafety_violations):
    """TXN112 on PostgreSQL: the identity map kept the object read before the FOR UPDATE
    re-read.  On SQLite (no row locks; the weak Session is the legacy driver mode) the
    same code is an unprotected read-modify-write: TXN109, fixed or not by populate_existing."""
    app = web_app
    response = app.post("/scenario/stale_lock", variant="unsafe")
    assert response.status_code == 200, response.text
    assert response.json()["same_object"] is True
    assert txnsafety_violations.codes() == (["TXN112"] if is_pg(app.url) else ["TXN109"])
    assert app.value("Account")["balance"] == 101       # the concurrent +1000 is lost
    app.post("/scenario/stale_lock", variant="safe")    # populate_existing=True
    assert txnsafety_violations.codes() == (["TXN112"] if is_pg(app.url) else ["TXN109"] * 2)
    assert app.value("Account")["balance"] == 101 + 1000 + 1


def test_for_update_fixes_weak_isolation_only_where_it_locks(web_app, txnsafety_violations):
    """SQLite renders no FOR UPDATE; with the sqlite3 driver's legacy transaction mode
    the read runs outside the transaction, so with_for_update() does not protect there."""
    app = web_app
    app.post("/scenario/weak_isolation", variant="for_update")
    if is_pg(app.url):
        assert txnsafety_violations.codes() == []
    else:
        assert txnsafety_violations.codes() == ["TXN109"]
        assert "legacy mode" in txnsafety_violations[0].message


def test_object_cached_from_an_earlier_request_is_half_protected(web_app, txnsafety_violations):
    """Khan's cached entity: read in one request, kept, written in another (TXN101)."""
    app = web_app
    assert app.post("/scenario/cached", variant="load").status_code == 200
    assert app.post("/scenario/cached", variant="unsafe").status_code == 200
    assert txnsafety_violations.codes() == ["TXN101"]
    violation = txnsafety_violations[0]
    assert violation.read_site.function == "cached" and violation.read_site.line < violation.write_site.line
    app.post("/scenario/cached", variant="load")
    app.post("/scenario/cached", variant="safe")           # re-read in the writing request
    assert txnsafety_violations.codes() == ["TXN101"]


def test_object_cached_through_pickle_is_still_half_protected(web_app, txnsafety_violations):
    """A cache server keeps entities pickled: the read's mark must survive the round trip."""
    assert web_app.post("/scenario/cached", variant="load").status_code == 200
    assert web_app.post("/scenario/cached", variant="pickled").status_code == 200
    assert txnsafety_violations.codes() == ["TXN101"]
    assert txnsafety_violations[0].read_site.function == "cached"
