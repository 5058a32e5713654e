"""The scenarios as production runs the checker: ``read_sites="adaptive"``, no model's
sites wanted yet (tests/_production_mode.py), so the common-read and quick-write paths
(txnsafety/sqlalchemy/reads.py ``_instances``, updates.py ``_judged_quickly``) judge them.

The rest of the suite runs under the pytest plugin's ``read_sites="always"``, which takes
every statement and write off those paths.  Here each unsafe scenario must still be
reported with exactly its code, its lost update shown in the database, and each safe
twin not reported: what production reports, not the sites only the debugging mode
finds (a model's first report names no read site; docs/production-mode.md).
"""
from __future__ import annotations

import pytest

from tests._production_mode import production_read_sites

from .conftest import is_pg
from .test_concurrency import N, counter_app, hammer  # noqa: F401  (counter_app: the fixture)
from .test_orm import stack  # noqa: F401  (the fixture)
from .test_web_scenarios import SAFE, UNSAFE, _expect


@pytest.fixture(autouse=True)
def production():
    with production_read_sites():
        yield


def _first_report_located_no_read(violation) -> None:
    """The proof that production's paths judged it: a read found at the write, before its
    model had a violation, has no site (TXN108 is reported at the read, with its site)."""
    if violation.code.value != "TXN108":
        assert violation.read_site is None, violation.read_site


@pytest.mark.parametrize("name", sorted(UNSAFE))
def test_unsafe_scenario_is_reported_in_production(web_app, name, txnsafety_violations):
    response = web_app.post(f"/scenario/{name}", variant="unsafe")
    assert response.status_code == 200, response.text
    assert txnsafety_violations.codes() == _expect(UNSAFE, name, web_app.url)
    violation = txnsafety_violations[0]
    assert violation.model.endswith((".Account", ".Tally"))
    assert violation.key == (None if name == "for_update_outside" and is_pg(web_app.url) else "1")
    assert violation.write_site is not None or name == "for_update_outside"
    _first_report_located_no_read(violation)
    if name == "internal":
        assert web_app.value("Tally")["n"] == 10          # the helper's +5 is lost
    if name == "versioned":
        assert response.json() == {"conflict": False}


@pytest.mark.parametrize("name", sorted(SAFE))
def test_safe_twin_is_not_reported_in_production(web_app, name, txnsafety_violations):
    for variant in _expect(SAFE, name, web_app.url):
        response = web_app.post(f"/scenario/{name}", variant=variant)
        assert response.status_code == 200, (variant, response.text)
        assert txnsafety_violations.codes() == [], variant


def test_stale_lock_in_production(web_app, txnsafety_violations):
    response = web_app.post("/scenario/stale_lock", variant="unsafe")
    assert response.status_code == 200, response.text
    assert txnsafety_violations.codes() == (["TXN112"] if is_pg(web_app.url) else ["TXN109"])
    _first_report_located_no_read(txnsafety_violations[0])
    assert web_app.value("Account")["balance"] == 101       # the concurrent +1000 is lost


@pytest.mark.parametrize("pickled", [False, True])
def test_object_cached_from_an_earlier_request_in_production(web_app, pickled, txnsafety_violations):
    assert web_app.post("/scenario/cached", variant="load").status_code == 200
    assert web_app.post("/scenario/cached", variant="pickled" if pickled else "unsafe").status_code == 200
    assert txnsafety_violations.codes() == ["TXN101"]
    _first_report_located_no_read(txnsafety_violations[0])
    web_app.post("/scenario/cached", variant="load")
    web_app.post("/scenario/cached", variant="safe")        # re-read in the writing request
    assert txnsafety_violations.codes() == ["TXN101"]


def test_racy_counter_is_reported_for_every_request_in_production(counter_app, txnsafety_violations):  # noqa: F811
    responses = hammer(counter_app, "racy")
    assert [r.status_code for r in responses] == [200] * N
    assert N - counter_app.value("Counter")["n"] == N - 1   # the lost updates happened
    assert txnsafety_violations.codes() == ["TXN109"] * N
    assert len({v.request_id for v in txnsafety_violations}) == N


@pytest.mark.parametrize("variant", ["for_update", "atomic", "versioned", "user_lock"])
def test_fixed_counter_is_not_reported_in_production(counter_app, variant, txnsafety_violations):  # noqa: F811
    responses = hammer(counter_app, variant)
    assert [r.status_code for r in responses] == [200] * N, [r.text for r in responses]
    assert txnsafety_violations == []


def test_a_re_read_the_common_path_failed_on_leaves_no_older_read(
        stack, monkeypatch, caplog, txnsafety_violations):  # noqa: F811  (stack: the fixture)
    """test_orm's failed refresh, on production's path: the re-read's note fails in the common
    statement's own step (``_new_window``, which the located path never calls).  The read
    from before it no longer says when the values were read, so the object has none."""
    import txnsafety
    from fixtures.sqla_app.models import Account
    from txnsafety.sqlalchemy import reads

    with stack.Main(expire_on_commit=False) as session:
        acct = session.get(Account, 1)
        session.commit()                                         # the read belongs to the ended root

        def broken(*args):
            raise RuntimeError("injected")
        monkeypatch.setattr(reads, "_new_window", broken)
        session.get(Account, 1, populate_existing=True)          # re-read in the next root: fails
        monkeypatch.undo()
        assert txnsafety.read_stamp(acct) is None and "internal error" in caplog.text
        acct.balance += 1
        session.commit()
    assert txnsafety_violations == []
