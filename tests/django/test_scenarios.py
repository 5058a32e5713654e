"""Every runtime stomping class through a real Django request, on SQLite and PostgreSQL.

Each scenario view has a safe twin that must not be reported.  The expected
codes differ by database only where isolation makes the difference: PostgreSQL
at READ COMMITTED loses updates inside ``atomic()`` (TXN109); SQLite does not.
"""
from __future__ import annotations

import os

import pytest
from django.db.transaction import TransactionManagementError

from fixtures.django_app.models import Account

VIEWS_FILE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "django_app",
                                          "views.py"))

#: scenario -> {alias: expected codes}
EXPECTED = {
    "half_protected": {"default": ["TXN101"], "pg": ["TXN101"]},
    "half_protected_safe": {"default": [], "pg": []},
    "unprotected": {"default": ["TXN102"], "pg": ["TXN102"]},
    "unprotected_safe": {"default": [], "pg": []},
    "internal": {"default": ["TXN103"], "pg": ["TXN103"]},
    "internal_safe": {"default": [], "pg": []},
    "scope_changed": {"default": ["TXN104"], "pg": ["TXN104"]},
    "scope_changed_safe": {"default": [], "pg": []},
    "weak_isolation": {"default": [], "pg": ["TXN109"]},
    "weak_isolation_safe": {"default": [], "pg": []},
    "lock_outside_safe": {"default": [], "pg": []},
    "bulk": {"default": ["TXN102"], "pg": ["TXN102"]},
    "bulk_safe": {"default": [], "pg": []},
    "refreshed": {"default": [], "pg": ["TXN109"]},
}


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_scenario_through_a_request(db, client, scenario, txnsafety_violations):
    response = client.get(f"/{db}/account/{scenario}/1/")
    assert response.status_code == 200, response.content
    assert txnsafety_violations.codes() == EXPECTED[scenario][db]
    for violation in txnsafety_violations:
        assert violation.model == "django_app.Account"
        assert violation.key == ("1" if db == "default" else f"{db}:1")
        assert violation.write_site is not None and violation.write_site.file == VIEWS_FILE
        assert violation.request_id  # the middleware's scope, not the test's


def test_txn103_names_the_nested_write_deep_in_the_call_stack(db, client, txnsafety_violations):
    client.get(f"/{db}/account/internal/1/")
    (violation,) = txnsafety_violations
    assert violation.other_write_site.function == "_credit"
    assert violation.other_write_site.file.endswith(os.path.join("django_app", "services.py"))
    assert violation.write_site.function == "internal"
    assert violation.read_site.function == "internal"
    assert "_apply_bonus" in violation.trace or "internal" in violation.trace
    # and the bonus really was erased: +10 only, the +5 is lost
    assert Account.objects.using(db).get(pk=1).balance == 110


def test_txn103_safe_twin_keeps_both_changes(db, client, txnsafety_violations):
    client.get(f"/{db}/account/internal_safe/1/")
    assert txnsafety_violations == []
    assert Account.objects.using(db).get(pk=1).balance == 115


def test_txn108_on_sqlite_is_reported_and_django_stays_silent(sqlite_db, client, txnsafety_violations):
    """SQLite has no FOR UPDATE: Django drops it silently; the same code raises on PostgreSQL."""
    response = client.get(f"/{sqlite_db}/account/lock_outside/1/")
    assert response.status_code == 200
    (violation,) = txnsafety_violations
    assert violation.code == "TXN108" and violation.model == "django_app.Account"
    assert violation.read_site.file == VIEWS_FILE and violation.read_site.function == "lock_outside"


def test_txn108_on_postgresql_is_reported_before_django_raises(pg_db, client, txnsafety_violations):
    with pytest.raises(TransactionManagementError):
        client.get(f"/{pg_db}/account/lock_outside/1/")
    # (Django 4.2's error reporter repr()s the view's locals, evaluating the queryset again: a
    # second TXN108 from that site may follow.)
    assert set(txnsafety_violations.codes()) == {"TXN108"}
    assert txnsafety_violations[0].read_site.function == "lock_outside"


@pytest.mark.txnsafety_allow("asserts the raise")
def test_raise_mode_stops_the_write(sqlite_db, client):
    import txnsafety
    with pytest.raises(txnsafety.StompingError) as info:
        client.get(f"/{sqlite_db}/account/unprotected/1/")
    assert info.value.violation.code == "TXN102"
    assert Account.objects.get(pk=1).balance == 100   # the save never ran


def test_repeatable_read_prevents_lost_updates(pg_tables, client, txnsafety_violations):
    """PostgreSQL REPEATABLE READ (OPTIONS isolation_level) makes a plain atomic() read-modify-write safe."""
    from tests.django.conftest import reset_rows
    reset_rows("pg_rr")
    response = client.get("/pg_rr/account/weak_isolation/1/")
    assert response.status_code == 200
    assert txnsafety_violations == []
    response = client.get("/pg_rr/account/unprotected/1/")   # outside atomic(): still unprotected
    assert txnsafety_violations.codes() == ["TXN102"]
    assert txnsafety_violations[0].key == "pg_rr:1"
