"""A model instance read in one request and saved in a later one (a copy kept in Django's
cache framework, pickled, or in a module global) writes values older than the row:
reported, at the later request's write.  Re-reading it before writing is the safe twin."""
from __future__ import annotations

import pytest
from django.core.cache import cache
from django.db import transaction
from django.db.models import F

import txnsafety
from fixtures.django_app.models import Account

_module_cache: dict = {}


def _cache_in_a_first_request(db, how):
    with txnsafety.request_scope("GET /account/1/"):
        account = Account.objects.using(db).get(pk=1)
        if how == "django-cache":
            cache.set("txnsafety-test-account", account)     # LocMemCache pickles, as Redis would
        else:
            _module_cache["account"] = account


def _cached(how):
    return cache.get("txnsafety-test-account") if how == "django-cache" else _module_cache.pop("account")


def _another_writer(db):
    Account.objects.using(db).filter(pk=1).update(balance=F("balance") + 5)


@pytest.mark.parametrize("how", ["django-cache", "module-global"])
def test_copy_cached_in_one_request_and_saved_in_a_later_one_is_reported(db, how, txnsafety_violations):
    _cache_in_a_first_request(db, how)
    _another_writer(db)
    with txnsafety.request_scope("POST /account/1/credit/"):
        account = _cached(how)
        with transaction.atomic(using=db):
            account.balance += 1
            account.save()
    assert Account.objects.using(db).get(pk=1).balance == 101          # the other writer's +5 is lost
    assert txnsafety_violations.codes() == ["TXN101"]                   # read outside, written inside
    assert txnsafety_violations[0].model == "django_app.Account"


def test_copy_saved_with_no_transaction_is_txn102(sqlite_db, txnsafety_violations):
    _cache_in_a_first_request(sqlite_db, "django-cache")
    with txnsafety.request_scope("POST /account/1/note/"):
        account = _cached("django-cache")
        account.balance -= 1
        account.save(update_fields=["balance"])
    assert txnsafety_violations.codes() == ["TXN102"]


@pytest.mark.parametrize("how", ["django-cache", "module-global"])
def test_cached_copy_reread_under_a_lock_before_writing_is_safe(db, how, txnsafety_violations):
    _cache_in_a_first_request(db, how)
    _another_writer(db)
    with txnsafety.request_scope("POST /account/1/credit/"):
        cached = _cached(how)
        with transaction.atomic(using=db):
            account = Account.objects.using(db).select_for_update().get(pk=cached.pk)
            account.balance += 1
            account.save()
    assert Account.objects.using(db).get(pk=1).balance == 106
    assert txnsafety_violations == []


def test_copy_written_in_the_request_that_read_it_is_judged_as_usual(sqlite_db, txnsafety_violations):
    with txnsafety.request_scope("POST /x/"):
        with transaction.atomic():
            account = Account.objects.get(pk=1)
            account.balance += 1
            account.save()
    assert txnsafety_violations == []
