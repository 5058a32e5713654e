"""How Django's ORM surfaces reach the checker: policies on every kind of model,
reads, refresh, writes, bulk_update, async, transactions, versioned saves."""
from __future__ import annotations

import asyncio
import threading

import django
import pytest
from django.db import connections, transaction
from django.db.models import F

import txnsafety
from fixtures.django_app.models import (Account, AuditedPlain, AuditEntry, Counter, Country, Customized,
                                        DailyStat, Doc, Plain, Restaurant, VipAccount, Wallet)
from txnsafety.django.transactions import transaction_for


def _scope():
    return txnsafety.current_scope()


# -- policies on abstract, proxy, MTI and customised models ----------------------------------

def test_policy_of_abstract_base_applies_to_concrete_subclass(sqlite_db, txnsafety_violations):
    wallet = Wallet.objects.get(pk=1)
    wallet.amount += 1
    wallet.save()
    assert txnsafety_violations.codes() == ["TXN102"]
    assert txnsafety_violations[0].model == "django_app.Wallet"


def test_proxy_and_concrete_objects_share_one_row_history(sqlite_db, txnsafety_violations):
    with transaction.atomic():
        plain = Account.objects.get(pk=1)
        vip = VipAccount.objects.get(pk=1)
        vip.balance += 5
        vip.save()
        plain.balance += 10
        plain.save()          # erases the +5 made through the proxy
    assert txnsafety_violations.codes() == ["TXN103"]
    assert Account.objects.get(pk=1).balance == 110


def test_proxy_declaring_its_own_policy_is_checked_and_its_base_is_not(sqlite_db, txnsafety_violations):
    plain = Plain.objects.get(pk=1)
    plain.value += 1
    plain.save()
    assert txnsafety_violations == []
    audited = AuditedPlain.objects.get(pk=1)
    audited.value += 1
    audited.save()
    assert txnsafety_violations.codes() == ["TXN102"]
    assert txnsafety_violations[0].model == "django_app.AuditedPlain"


def test_model_overriding_from_db_without_super_is_still_stamped(sqlite_db, txnsafety_violations):
    obj = Customized.objects.get(pk=1)
    assert txnsafety.read_stamp(obj) is not None
    obj.value += 1
    obj.save()
    assert txnsafety_violations.codes() == ["TXN102"]


def test_multi_table_inheritance_write_is_judged_in_the_callers_transaction(sqlite_db, txnsafety_violations):
    # save_base opens its own atomic block for the parent table; the check must not see it.
    restaurant = Restaurant.objects.get(pk=1)
    restaurant.seats += 1
    restaurant.save()
    assert txnsafety_violations.codes() == ["TXN102"]     # not TXN101
    with transaction.atomic():
        restaurant = Restaurant.objects.get(pk=1)
        restaurant.seats += 1
        restaurant.save()
    assert txnsafety_violations.codes() == ["TXN102"]


def test_select_related_objects_are_stamped_too(sqlite_db, txnsafety_violations):
    wallet = Wallet.objects.select_related("account").get(pk=1)
    stamp = txnsafety.read_stamp(wallet.account)
    assert stamp is not None and stamp.transaction is None
    wallet.account.balance += 1
    wallet.account.save()
    assert txnsafety_violations.codes() == ["TXN102"]


def test_khan_policies_on_django_models(sqlite_db, txnsafety_violations):
    with transaction.atomic():
        country = Country.objects.get(pk=1)
        country.save()                                   # never written: TXN110
    assert txnsafety_violations.codes() == ["TXN110"]
    AuditEntry.objects.create(text="new")               # written once: creating is fine
    assert len(txnsafety_violations) == 1
    entry = AuditEntry.objects.get(pk=1)
    entry.text = "changed"
    entry.save()                                         # ... re-writing is not
    assert txnsafety_violations.codes() == ["TXN110", "TXN110"]
    with txnsafety.single_writer("nightly"):
        stat = DailyStat.objects.get(pk=1)
        stat.total += 1
        stat.save()
    assert len(txnsafety_violations) == 2
    stat.save()                                          # outside the single writer
    assert txnsafety_violations.codes() == ["TXN110"] * 3


def test_strict_mode_checks_models_without_policy(sqlite_db, txnsafety_violations):
    from django.test import override_settings
    with override_settings(TXNSAFETY={"ENABLED": True, "STRICT": True}):
        plain = Plain.objects.get(pk=1)
        plain.save()
    assert txnsafety_violations.codes() == ["TXN102"]
    assert not txnsafety.settings.strict


# -- reads -----------------------------------------------------------------------------------------

def test_read_stamp_records_the_root_transaction_and_for_update(sqlite_db):
    outside = Account.objects.get(pk=1)
    assert txnsafety.read_stamp(outside).transaction is None
    with transaction.atomic():
        inside = Account.objects.get(pk=1)
        locked = Account.objects.select_for_update().get(pk=1)
        with transaction.atomic():
            nested = Account.objects.get(pk=1)
        root = transaction_for("default")
    assert txnsafety.read_stamp(inside).transaction is root
    assert txnsafety.read_stamp(nested).transaction is root          # a savepoint shares its root
    assert not txnsafety.read_stamp(inside).for_update
    assert txnsafety.read_stamp(locked).for_update
    assert root.database == "default" and root.prevents_lost_update


def test_objects_of_unchecked_models_are_not_stamped(sqlite_db):
    before = len(_scope().stamps)
    list(Plain.objects.all())
    assert len(_scope().stamps) == before


def test_reads_outside_any_scope_cost_nothing_and_record_nothing(sqlite_db):
    box = {}

    def worker():  # a thread started by hand has no request scope
        box["account"] = Account.objects.get(pk=1)
        box["stamp"] = txnsafety.read_stamp(box["account"])
        connections.close_all()

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert box["stamp"] is None and box["account"].balance == 100


def test_refresh_from_db_restamps_the_object_without_counting_the_temporary(sqlite_db, txnsafety_violations):
    account = Account.objects.get(pk=1)
    first = txnsafety.read_stamp(account)
    assert first.transaction is None
    stamps_before = len(_scope().stamps)
    with transaction.atomic():
        account.refresh_from_db()
        second = txnsafety.read_stamp(account)
        assert second.transaction is transaction_for("default")
        assert len(_scope().stamps) == stamps_before           # the temporary instance left no stamp
        account.balance += 1
        account.save()
    assert txnsafety_violations == []                           # re-read inside: not TXN101


def test_partial_refresh_and_deferred_loads_keep_the_older_stamp(sqlite_db, txnsafety_violations):
    account = Account.objects.only("owner").get(pk=1)
    first = txnsafety.read_stamp(account)
    with transaction.atomic():
        assert account.balance == 100                            # deferred field: refresh_from_db(fields=)
        account.refresh_from_db(fields=["note"])
        assert txnsafety.read_stamp(account) is first
        account.balance += 1
        account.save()
    assert txnsafety_violations.codes() == ["TXN101"]


@pytest.mark.skipif(django.VERSION < (5, 1), reason="refresh_from_db(from_queryset=) is Django 5.1+")
def test_refresh_from_db_for_update_carries_the_lock(pg_db, txnsafety_violations):
    account = Account.objects.using(pg_db).get(pk=1)
    with transaction.atomic(using=pg_db):
        account.refresh_from_db(from_queryset=Account.objects.using(pg_db).select_for_update())
        assert txnsafety.read_stamp(account).for_update
        account.balance += 1
        account.save()
    assert txnsafety_violations == []                             # not TXN109: the row was locked


def test_update_or_create_is_safe(db, txnsafety_violations):
    Account.objects.using(db).update_or_create(pk=1, defaults={"note": "hi"})
    assert txnsafety_violations == []


def test_queryset_update_with_f_is_never_reported(db, txnsafety_violations):
    Account.objects.using(db).filter(pk=1).update(balance=F("balance") + 1)
    assert txnsafety_violations == []
    assert Account.objects.using(db).get(pk=1).balance == 101


# -- writes ---------------------------------------------------------------------------------------

def test_disjoint_update_fields_do_not_erase_each_other(sqlite_db, txnsafety_violations):
    with transaction.atomic():
        a = Account.objects.get(pk=1)
        b = Account.objects.get(pk=1)
        a.balance += 1
        a.save(update_fields=["balance"])
        b.note = "hello"
        b.save(update_fields=["note"])
    assert txnsafety_violations == []
    with transaction.atomic():
        c = Account.objects.get(pk=1)
        d = Account.objects.get(pk=1)
        c.balance += 1
        c.save(update_fields=["balance"])
        d.save()                       # whole row: erases c's balance
    assert txnsafety_violations.codes() == ["TXN103"]


def test_update_fields_by_attname_and_name_are_the_same_column(sqlite_db, txnsafety_violations):
    with transaction.atomic():
        a = Wallet.objects.get(pk=1)
        b = Wallet.objects.get(pk=1)
        a.account_id = 2
        a.save(update_fields=["account_id"])
        b.save(update_fields=["account"])     # writes back the account it loaded: erases a's
    assert txnsafety_violations.codes() == ["TXN103"]


def test_raw_saves_from_fixture_loading_are_ignored(sqlite_db, txnsafety_violations):
    account = Account.objects.get(pk=1)
    account.save_base(raw=True)
    assert txnsafety_violations == []


def test_created_objects_need_no_read_protection(sqlite_db, txnsafety_violations):
    Account.objects.create(pk=10, balance=1)
    account = Account(pk=11, balance=2)
    account.save()
    assert txnsafety_violations == []


def test_bulk_update_is_judged_per_object_as_a_partial_write(sqlite_db, txnsafety_violations):
    with transaction.atomic():
        accounts = list(Account.objects.order_by("pk"))
        again = Account.objects.get(pk=2)
        again.note = "x"
        again.save(update_fields=["note"])
        for account in accounts:
            account.balance += 1
        Account.objects.bulk_update(accounts, ["balance"])      # disjoint from "note": safe
    assert txnsafety_violations == []
    accounts = list(Account.objects.order_by("pk"))
    Account.objects.bulk_update(accounts, ["balance"], batch_size=2)
    assert txnsafety_violations.codes() == ["TXN102"]
    assert len(txnsafety_violations) == 1                        # deduplicated: one line, three rows


# -- async ORM and async middleware --------------------------------------------------------------------

def test_async_view_aget_asave_through_the_async_middleware(db, txnsafety_violations):
    from django.test import AsyncClient

    async def go():
        client = AsyncClient()
        scope = await client.get("/async/scope/")
        bad = await client.get(f"/{db}/async/unprotected/1/")
        good = await client.get(f"/{db}/async/safe/1/")
        return scope, bad, good

    scope, bad, good = asyncio.run(go())
    assert scope.json()["scope"] == "GET /async/scope/"
    assert bad.status_code == 200 and good.status_code == 200
    assert txnsafety_violations.codes() == ["TXN102"]
    assert txnsafety_violations[0].request_id
    assert Account.objects.using(db).get(pk=1).balance == 102


def test_async_orm_sites_point_at_the_view(sqlite_db, txnsafety_violations):
    from django.test import AsyncClient
    asyncio.run(AsyncClient().get(f"/{sqlite_db}/async/unprotected/1/"))
    (violation,) = txnsafety_violations
    assert violation.write_site.function == "async_unprotected"
    assert violation.read_site.function == "async_unprotected"
    assert violation.read_site.line < violation.write_site.line


def test_arefresh_and_abulk_update(sqlite_db, txnsafety_violations):
    from asgiref.sync import sync_to_async

    async def go():
        account = await Account.objects.aget(pk=1)
        await account.arefresh_from_db()
        account.balance += 1
        await Account.objects.abulk_update([account], ["balance"])

    asyncio.run(go())
    assert txnsafety_violations.codes() == ["TXN102"]
    del sync_to_async


# -- transactions --------------------------------------------------------------------------------------

def test_each_root_atomic_block_is_a_new_transaction_and_savepoints_share_it(sqlite_db):
    reused = transaction.atomic()           # as a decorator would: one Atomic for every call
    seen = []
    for _ in range(2):
        with reused:
            root = transaction_for("default")
            with transaction.atomic():
                assert transaction_for("default") is root
            with reused:                    # the same Atomic nested: a savepoint, not a new root
                assert transaction_for("default") is root
            seen.append(root)
    assert seen[0] is not None and seen[0].root_id != seen[1].root_id
    assert transaction_for("default") is None


def test_testcase_atomics_are_discounted(sqlite_db, txnsafety_violations):
    outer = transaction.atomic()
    outer._from_testcase = True             # exactly what django.test.TestCase does
    with outer:
        assert transaction_for("default") is None
        account = Account.objects.get(pk=1)
        account.save()
        with transaction.atomic():
            assert transaction_for("default") is not None
        outer_rollback = True
        transaction.set_rollback(outer_rollback)
    assert txnsafety_violations.codes() == ["TXN102"]           # as in production, not "protected"


def test_transaction_identity_is_per_database(sqlite_db, pg_db, txnsafety_violations):
    with transaction.atomic(using="pg"):
        account = Account.objects.using("pg").select_for_update().get(pk=1)
        with transaction.atomic(using="default"):
            assert transaction_for("default").root_id != transaction_for("pg").root_id
        assert transaction_for("default") is None
        account.balance += 1
        account.save()
    assert txnsafety_violations == []


def test_isolation_verdicts_from_connection_settings(pg_tables):
    from txnsafety.django.transactions import isolation_verdict
    assert isolation_verdict("default") == ("serializable", True)
    assert isolation_verdict("pg") == ("read committed", False)
    assert isolation_verdict("pg_rr") == ("repeatable read", True)


def test_isolation_override_setting(sqlite_db, pg_db, txnsafety_violations):
    from django.test import override_settings
    with override_settings(TXNSAFETY={"ENABLED": True, "ISOLATION": {"pg": "serializable"}}):
        with transaction.atomic(using="pg"):
            account = Account.objects.using("pg").get(pk=1)
            account.save()
    assert txnsafety_violations == []


# -- versioned models --------------------------------------------------------------------------------

def _concurrent_edit(db):
    """Another client commits an edit of the document (its own thread, its own connection)."""
    def edit():
        Doc.objects.using(db).filter(pk=1).update(body="theirs", version=F("version") + 1)
        connections[db].close()
    thread = threading.Thread(target=edit)
    thread.start()
    thread.join()


def test_versioned_model_saved_plainly_loses_a_concurrent_edit_and_is_reported(db, client, interleave,
                                                                               txnsafety_violations):
    interleave["fn"] = lambda point: _concurrent_edit(db) if point == "after_read" else None
    response = client.get(f"/{db}/doc/1/edit/?append=mine")
    assert response.status_code == 200
    doc = Doc.objects.using(db).get(pk=1)
    assert doc.body == "mine"                   # "theirs" is gone
    assert txnsafety_violations.codes() == ["TXN110"]
    assert "versioned_save" in txnsafety_violations[0].message


def test_versioned_save_turns_the_lost_update_into_a_conflict(db, client, interleave, txnsafety_violations):
    interleave["fn"] = lambda point: _concurrent_edit(db) if point == "after_read" else None
    response = client.get(f"/{db}/doc/1/edit-safe/?append=mine")
    assert response.status_code == 409
    assert Doc.objects.using(db).get(pk=1).body == "theirs"
    interleave.clear()
    response = client.get(f"/{db}/doc/1/edit-safe/?append=+mine")
    assert response.status_code == 200
    doc = Doc.objects.using(db).get(pk=1)
    assert (doc.body, doc.version) == ("theirs mine", 2)
    assert txnsafety_violations == []


def test_versioned_plain_save_inside_a_locking_transaction_is_fine(db, txnsafety_violations):
    with transaction.atomic(using=db):
        doc = Doc.objects.using(db).select_for_update().get(pk=1)
        doc.body = "x"
        doc.save()
    assert txnsafety_violations == []


# -- lock service integration ----------------------------------------------------------------------

def test_refetcher_is_registered_for_django_models(db):
    from txnsafety.adapters import arefetch, refetch
    account = Account.objects.using(db).get(pk=1)
    Account.objects.using(db).filter(pk=1).update(balance=7)
    fresh = refetch(account)
    assert fresh is not account and fresh.balance == 7 and fresh._state.db == db
    assert asyncio.run(arefetch(account)).balance == 7


def test_fetch_under_lock_on_a_django_model(db, txnsafety_violations):
    locks = pytest.importorskip("txnsafety.locks")
    counter = Counter.objects.using(db).get(pk=1)      # read outside the lock
    with locks.fetch_under_lock(counter) as again:
        assert again is not counter
        again.value += 1
        again.save()
    assert txnsafety_violations == []
    counter.value += 1
    with locks.user_write_lock(f"counter:{counter.pk}"):
        counter.save()                                   # the stale object, under the lock
    # read outside the lock (TXN101), and it erases the write made through `again` (TXN103)
    assert txnsafety_violations.codes() == ["TXN101", "TXN103"]
