"""Writes the database makes safe are not reported; their racy twins are (SQLite and PostgreSQL).

Expressions (``F()``) assigned on an instance, blind partial writes, Django's own
bookkeeping (``update_last_login``), a hand-sent ``pre_save``, and rows locked
through ``select_related(...).select_for_update()``.
"""
from __future__ import annotations

import datetime as dt
import os
import threading

import pytest
from django.db import connections, transaction
from django.db.models import F
from django.db.models.signals import pre_save
from django.utils import timezone

import txnsafety
from fixtures.django_app.models import Account, Wallet

HERE = os.path.abspath(__file__)


@pytest.fixture
def strict():
    """Django's own models declare no policy: check them as strict mode does."""
    from django.test import override_settings
    with override_settings(TXNSAFETY={"ENABLED": True, "STRICT": True, "ALLOW": []}):
        yield


# -- expressions on an instance -------------------------------------------------------------

def test_f_expression_assigned_on_the_instance_is_atomic(db, txnsafety_violations):
    account = Account.objects.using(db).get(pk=1)
    account.balance = F("balance") + 5
    account.save(update_fields=["balance"])
    assert txnsafety_violations == []
    assert Account.objects.using(db).get(pk=1).balance == 105


def test_value_computed_in_python_is_the_racy_twin(db, txnsafety_violations):
    account = Account.objects.using(db).get(pk=1)
    account.balance += 5
    account.save(update_fields=["balance"])
    assert txnsafety_violations.codes() == ["TXN102"]
    assert txnsafety_violations[0].detail["fields written"] == "balance"


def test_whole_row_save_with_an_expression_still_writes_the_other_columns_from_the_read(
        sqlite_db, txnsafety_violations):
    account = Account.objects.get(pk=1)
    account.balance = F("balance") + 5
    account.save()
    assert txnsafety_violations.codes() == ["TXN102"]
    assert txnsafety_violations[0].detail["fields written"] == "the whole row"


def test_f_expression_loses_no_update_under_concurrency(pg_db, txnsafety_violations):
    """Two threads add 1 a hundred times each through F() on the instance: nothing is lost."""
    barrier = threading.Barrier(2)

    def add() -> None:
        with txnsafety.request_scope("thread"):
            barrier.wait()
            for _ in range(100):
                account = Account.objects.using(pg_db).get(pk=1)
                account.balance = F("balance") + 1
                account.save(update_fields=["balance"])
        connections[pg_db].close()

    threads = [threading.Thread(target=add) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert Account.objects.using(pg_db).get(pk=1).balance == 300
    assert txnsafety_violations == []


# -- blind writes ---------------------------------------------------------------------------

def test_blind_single_column_write_from_a_form_is_not_reported(db, txnsafety_violations):
    account = Account.objects.using(db).get(pk=1)
    account.note = "a nickname typed in a form"
    account.save(update_fields=["note"])
    assert txnsafety_violations == []


@pytest.mark.parametrize("change", ["append", "unchanged", "number"])
def test_partial_write_derived_from_the_read_is_reported(db, change, txnsafety_violations):
    Account.objects.using(db).filter(pk=1).update(note="hello")
    account = Account.objects.using(db).get(pk=1)
    field = "balance" if change == "number" else "note"
    if change == "append":
        account.note = account.note + " -- signed"
    elif change == "number":
        account.balance = account.balance * 2
    account.save(update_fields=[field])          # "unchanged": the stale copy written back
    assert txnsafety_violations.codes() == ["TXN102"]


def test_timestamp_of_now_is_blind_but_a_shifted_date_is_derived(sqlite_db, strict, txnsafety_violations):
    from django.contrib.auth.models import User
    User.objects.create(pk=1, username="ann", last_login=timezone.now() - dt.timedelta(days=3))
    user = User.objects.get(pk=1)
    user.last_login = timezone.now()
    user.save(update_fields=["last_login"])
    assert txnsafety_violations == []
    user = User.objects.get(pk=1)
    user.last_login = user.last_login + dt.timedelta(days=30)
    user.save(update_fields=["last_login"])
    assert txnsafety_violations.codes() == ["TXN102"]


def test_djangos_update_last_login_is_not_reported(db, strict, txnsafety_violations):
    from django.contrib.auth.models import User, update_last_login
    User.objects.using(db).create(pk=1, username="ann", last_login=timezone.now() - dt.timedelta(days=3))
    user = User.objects.using(db).get(pk=1)
    update_last_login(None, user)
    assert txnsafety_violations == []
    user.last_login = user.last_login - dt.timedelta(days=1)  # the racy twin: derived from the read
    user.save(update_fields=["last_login"])
    assert txnsafety_violations.codes() == ["TXN102"]


def test_djangos_own_whole_row_saves_are_framework_internal(db, strict, txnsafety_violations):
    """``SetPasswordForm.save()`` saves the whole user row from ``django.contrib``."""
    from django.contrib.auth.forms import SetPasswordForm
    from django.contrib.auth.models import User
    User.objects.using(db).create(pk=1, username="ann")
    user = User.objects.using(db).get(pk=1)
    user._state.db = db
    form = SetPasswordForm(user, {"new_password1": "x-Very-l0ng-secret", "new_password2": "x-Very-l0ng-secret"})
    assert form.is_valid(), form.errors
    form.save()
    assert txnsafety_violations == []
    user.first_name = "Ann"
    user.save()                                   # the same write from the application: reported
    assert txnsafety_violations.codes() == ["TXN102"]


# -- pre_save sent by hand ------------------------------------------------------------------

def test_hand_sent_pre_save_is_not_a_write(db, txnsafety_violations):
    account = Account.objects.using(db).get(pk=1)
    pre_save.send(sender=Account, instance=account, raw=False, using=db, update_fields=None)
    Account.objects.using(db).filter(pk=1).update(balance=F("balance") + 1)
    assert txnsafety_violations == []
    account.save()                                # the real save() is judged
    assert txnsafety_violations.codes() == ["TXN102"]


# -- rows locked through a join ----------------------------------------------------------------

def _credit_through_join(alias: str, **of: tuple[str, ...]) -> None:
    with transaction.atomic(using=alias):
        # (an inner join: PostgreSQL locks no row on the nullable side of an outer join)
        wallet = (Wallet.objects.using(alias).select_related("account").filter(account__isnull=False)
                  .select_for_update(**of).get(pk=1))
        wallet.account.balance += 1
        wallet.account.save()
        wallet.amount += 1
        wallet.save()


def test_select_related_for_update_locks_the_joined_rows_on_postgresql(pg_db, txnsafety_violations):
    _credit_through_join(pg_db)
    assert txnsafety_violations == []


def test_select_for_update_of_self_leaves_the_joined_row_unlocked(pg_db, txnsafety_violations):
    _credit_through_join(pg_db, of=("self",))
    assert txnsafety_violations.codes() == ["TXN109"]
    assert txnsafety_violations[0].model == "django_app.Account"


def test_select_for_update_of_the_join_only_leaves_the_main_row_unlocked(pg_db, txnsafety_violations):
    _credit_through_join(pg_db, of=("account",))
    assert txnsafety_violations.codes() == ["TXN109"]
    assert txnsafety_violations[0].model == "django_app.Wallet"


def test_select_related_for_update_on_sqlite_is_safe_by_its_transaction(sqlite_db, txnsafety_violations):
    _credit_through_join(sqlite_db, of=("self",))
    assert txnsafety_violations == []
