"""The app, its settings and the middleware (sync and async)."""
from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import iscoroutinefunction
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

import txnsafety
from fixtures.django_app.models import Account
from txnsafety.context import Priority
from txnsafety.django import conf, hooks
from txnsafety.django.middleware import TxnSafetyMiddleware

BASE = {"ENABLED": True, "STRICT": False, "ALLOW": []}


def all_batch(path, headers):
    return Priority.BATCH


def test_middleware_opens_one_scope_per_request_and_restores_the_callers(client):
    mine = txnsafety.current_scope()
    first = client.get("/scope/").json()
    second = client.get("/scope/").json()
    assert first["scope"] == "GET /scope/" and first["priority"] == "interactive"
    assert first["id"] != second["id"] != mine.id
    assert txnsafety.current_scope() is mine


def test_priority_from_header_and_from_a_rule_setting(client):
    assert client.get("/scope/", HTTP_X_TXNSAFETY_PRIORITY="batch").json()["priority"] == "batch"
    with override_settings(TXNSAFETY={**BASE, "PRIORITY_RULE": "tests.django.test_app.all_batch"}):
        assert client.get("/scope/").json()["priority"] == "batch"
    txnsafety.settings.priority_rule = None      # configure() cannot unset a rule
    assert client.get("/scope/").json()["priority"] == "interactive"


def staff_only(method, path, headers):
    """A SAMPLER: check the requests that carry the staff header, leave the rest to SAMPLE_RATE."""
    return True if headers.get("x-staff") == "1" else None


def test_a_sampler_setting_decides_which_requests_are_checked_and_goes_with_the_setting(client):
    try:
        with override_settings(TXNSAFETY={**BASE, "SAMPLE_RATE": 0.0, "SAMPLER": "tests.django.test_app.staff_only"}):
            assert client.get("/scope/").json()["scope"] is None
            assert client.get("/scope/", HTTP_X_STAFF="1").json()["scope"] == "GET /scope/"
        assert txnsafety.settings.sampler is None  # TXNSAFETY without SAMPLER: no sampler
    finally:
        txnsafety.settings.sampler = None
        txnsafety.configure(sample_rate=1.0)       # BASE names no SAMPLE_RATE: it stays as set
    assert client.get("/scope/").json()["scope"] == "GET /scope/"


def test_middleware_is_sync_and_async_capable():
    assert TxnSafetyMiddleware.sync_capable and TxnSafetyMiddleware.async_capable
    sync_mw = TxnSafetyMiddleware(lambda request: txnsafety.current_scope())
    assert not iscoroutinefunction(sync_mw)

    async def get_response(request):
        return txnsafety.current_scope()

    async_mw = TxnSafetyMiddleware(get_response)
    assert iscoroutinefunction(async_mw)
    from django.test import RequestFactory
    request = RequestFactory().get("/x/")
    seen_sync = sync_mw(request)
    seen_async = asyncio.run(async_mw(request))
    assert seen_sync.name == seen_async.name == "GET /x/"
    assert seen_sync is not seen_async
    assert seen_async.stamps == {} and txnsafety.current_scope() is not seen_sync


def test_async_middleware_scope_reaches_sync_to_async_threads(client):
    from django.test import AsyncClient
    response = asyncio.run(AsyncClient().get("/async/scope/"))
    assert response.json()["scope"] == "GET /async/scope/"


def test_allow_setting_silences_a_model_and_code(sqlite_db, client, txnsafety_violations):
    with override_settings(TXNSAFETY={**BASE, "ALLOW": ["django_app.Account:TXN102"]}):
        client.get(f"/{sqlite_db}/account/unprotected/1/")
        client.get(f"/{sqlite_db}/account/half_protected/1/")
    assert txnsafety_violations.codes() == ["TXN101"]
    assert txnsafety.settings.allow == ()


def test_enabled_false_switches_everything_off(sqlite_db, client, txnsafety_violations):
    with override_settings(TXNSAFETY={**BASE, "ENABLED": False}):
        seen = client.get("/scope/").json()["scope"]
        assert seen != "GET /scope/"         # no request scope opened (the test's own shows through)
        client.get(f"/{sqlite_db}/account/unprotected/1/")
        account = Account.objects.get(pk=1)
        assert txnsafety.read_stamp(account) is None
    assert txnsafety_violations == []
    assert txnsafety.settings.enabled


def test_mode_setting_is_ignored_under_pytest_and_applied_otherwise(monkeypatch):
    previous = txnsafety.settings.mode
    assert "mode" not in conf.apply({"MODE": "log"})
    assert txnsafety.settings.mode == previous
    monkeypatch.setattr(conf, "test_plugin_active", lambda: False)
    monkeypatch.delenv("TXNSAFETY_MODE", raising=False)
    try:
        assert conf.apply({"MODE": "collect"})["mode"] == "collect"
        assert txnsafety.settings.mode == "collect"
    finally:
        txnsafety.configure(mode=previous)


@pytest.mark.parametrize("bad", [{"MOOD": "log"}, {"MODE": "loud"}, {"ALLOW": "Account"},
                                 {"ALLOW": ["Account:E501"]}, {"ISOLATION": "serializable"},
                                 {"PRIORITY_RULE": "no.such.rule"}, {"SAMPLER": "no.such.sampler"},
                                 {"SAMPLER": 3}, {"SAMPLER": "tests.django.test_app.BASE"}, ["MODE"]])
def test_bad_settings_are_improperly_configured(bad, monkeypatch):
    monkeypatch.setattr(conf, "test_plugin_active", lambda: False)
    monkeypatch.delenv("TXNSAFETY_MODE", raising=False)
    previous = txnsafety.settings.mode
    try:
        with pytest.raises(ImproperlyConfigured):
            conf.apply(bad)
    finally:
        txnsafety.configure(mode=previous)


def test_system_check_warns_when_the_middleware_is_missing():
    from txnsafety.django.apps import check_middleware
    assert check_middleware() == []
    with override_settings(MIDDLEWARE=[]):
        (warning,) = check_middleware()
    assert warning.id == "txnsafety.W001"


def test_hooks_install_is_idempotent_and_uninstall_restores_django(sqlite_db):
    from django.db.models import QuerySet
    from txnsafety.django import reads
    hooks.install()
    hooks.install()
    assert QuerySet.__dict__["_fetch_all"] is reads._fetch_all
    hooks.uninstall()
    try:
        assert QuerySet.__dict__["_fetch_all"] is reads._originals["QuerySet._fetch_all"]
        assert txnsafety.read_stamp(Account.objects.get(pk=1)) is None
    finally:
        hooks.install()
    assert QuerySet.__dict__["_fetch_all"] is reads._fetch_all
    assert txnsafety.read_stamp(Account.objects.get(pk=1)) is not None


def test_a_request_made_inside_a_test_keeps_the_tests_locks(sqlite_db, client):
    locks = pytest.importorskip("txnsafety.locks")
    with locks.user_write_lock("k") as lease:
        client.get("/scope/")
        assert txnsafety.held_leases() == (lease,)
    assert txnsafety.held_leases() == ()
