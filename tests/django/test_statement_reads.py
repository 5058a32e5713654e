"""Django reads are stamped once per statement (txnsafety/django/reads.py): every way
the ORM loads a row still leaves the read it made, and the judgement of a later
write is the same as when each row was stamped by itself."""
from __future__ import annotations

import contextlib
import gc
import weakref

import django
import pytest
from django.db import transaction
from django.db.models import Prefetch

import txnsafety
from fixtures.django_app.models import Account, Plain, Wallet
from tests._production_mode import production_read_sites
from txnsafety import scopes
from txnsafety.config import settings
from txnsafety.django import saves
from txnsafety.django.transactions import transaction_for


def _scope():
    return txnsafety.current_scope()


def test_a_list_shares_one_read_and_each_row_is_named_in_its_own_stamp(sqlite_db, txnsafety_violations):
    with transaction.atomic():
        rows = list(Account.objects.order_by("pk"))
        root = transaction_for("default")
    assert len(rows) == 3
    stamps = [txnsafety.read_stamp(row) for row in rows]
    assert all(stamp is not None for stamp in stamps)
    assert len({stamp.tick for stamp in stamps}) == 1              # one statement, one read
    assert all(stamp.transaction is root and not stamp.for_update for stamp in stamps)
    assert [stamp.entity for stamp in stamps] == rows and all(s.entity is r for s, r in zip(stamps, rows))
    # what a blind write is told from: each row keeps the values it was loaded with
    assert saves.loaded_values(rows[1])["balance"] == 100 and saves.loaded_values(rows[1])["owner"] == "owner2"
    assert saves.loaded_token(rows[2]) is _scope().token


def test_a_row_of_a_list_written_after_its_transaction_is_reported(sqlite_db, txnsafety_violations):
    with transaction.atomic():
        rows = list(Account.objects.order_by("pk"))
    rows[1].balance += 1
    rows[1].save()                                                 # its transaction has ended
    assert txnsafety_violations.codes() == ["TXN104"]
    with transaction.atomic():
        rows = list(Account.objects.order_by("pk"))
        rows[2].balance += 1
        rows[2].save()                                             # same transaction: safe
    assert txnsafety_violations.codes() == ["TXN104"]


def test_a_later_read_of_one_row_replaces_only_its_stamp(sqlite_db, txnsafety_violations):
    rows = list(Account.objects.order_by("pk"))                    # outside any transaction
    with transaction.atomic():
        again = Account.objects.get(pk=rows[0].pk)
        assert again is not rows[0]
        first = list(Account.objects.filter(pk=rows[0].pk))[0]
        first.balance += 1
        first.save()
    assert txnsafety.read_stamp(rows[1]).transaction is None
    assert txnsafety_violations.codes() == []


def test_two_lists_loading_one_row_and_both_written_is_txn103(sqlite_db, txnsafety_violations):
    with transaction.atomic():
        mine = list(Account.objects.order_by("pk"))[0]
        theirs = list(Account.objects.filter(owner="owner1"))[0]
        theirs.balance += 5
        theirs.save()
        mine.note = mine.note + "!"
        mine.save()                                                # erases theirs.balance
    assert txnsafety_violations.codes() == ["TXN103"]


def test_a_list_row_carries_its_read_and_an_object_in_its_place_has_none(sqlite_db):
    # the read travels on the row (its LOADED mark), not in an id-keyed table: the request
    # keeps no row alive, and a new object that takes a dropped row's id has no read
    rows = list(Account.objects.all())
    refs = [weakref.ref(row) for row in rows]
    assert all(type(row.__dict__[saves.LOADED][0]) is saves.LoadRead for row in rows)
    del rows
    gc.collect()
    assert len(refs) == 3 and all(ref() is None for ref in refs)
    fresh = [Account(pk=n, owner="x", balance=0) for n in range(200)]  # some take the dropped rows' ids
    assert all(txnsafety.read_stamp(obj) is None for obj in fresh)


def test_a_list_rows_read_is_this_requests_only(sqlite_db):
    import pickle
    rows = list(Account.objects.order_by("pk"))
    assert txnsafety.read_stamp(rows[0]) is not None
    copy = pickle.loads(pickle.dumps(rows[1]))                     # no transaction or lease in the pickle
    mark = copy.__dict__[saves.LOADED]
    assert type(mark[0]) is not saves.LoadRead and mark[0] is not _scope().token
    assert txnsafety.read_stamp(copy) is None
    assert saves.loaded_values(copy)["balance"] == 100
    txnsafety.forget(rows[2])                                      # forgotten: no read, still loaded here
    assert txnsafety.read_stamp(rows[2]) is None
    assert saves.loaded_token(rows[2]) is _scope().token


def test_deferred_fields_are_not_loaded_to_be_remembered(sqlite_db):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    with CaptureQueriesContext(connection) as queries:
        rows = list(Account.objects.only("balance").order_by("pk"))
        deferred = list(Account.objects.defer("note", "owner").order_by("pk"))
    assert len(queries) == 2                                       # no deferred field loaded to copy it
    assert saves.loaded_values(rows[0]) == {"balance": 100}        # keys are never kept: see below
    assert saves.loaded_values(deferred[2]) == {"balance": 100}
    assert all(txnsafety.read_stamp(row) is not None for row in rows + deferred)


@contextlib.contextmanager
def _unseen(how: str):
    """Code the checker does not see: switched off, or in a request the sample leaves out."""
    if how == "off":
        settings.enabled = False
        try:
            yield
        finally:
            settings.enabled = True
        return
    txnsafety.configure(sample_rate=0.0)
    opened = scopes.open_request("GET", "/unseen", {})
    try:
        assert opened is not None and txnsafety.current_scope() is None
        yield
    finally:
        scopes.close_request(*opened)
        txnsafety.configure(sample_rate=1.0)


@pytest.mark.parametrize("how", ["off", "left out by the sample"])
def test_a_statement_the_checker_does_not_see_fills_its_cache_as_django_does(sqlite_db, how):
    # reads._fetch_all fills the cache itself there too (no pass through _model_iter)
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    with _unseen(how), CaptureQueriesContext(connection) as queries:
        # iterated, not list(): list() asks len() first and so fills the cache twice over
        owners = [owner for owner in Account.objects.prefetch_related("wallet_set").order_by("pk")]
        wallets = [wallet for owner in owners for wallet in owner.wallet_set.all()]
    assert len(queries) == 2                                       # prefetched with the statement
    assert len(owners) == 3 and wallets
    assert all(saves.loaded_token(row) is None for row in owners + wallets)  # nothing was stamped


def test_a_primary_key_is_never_written_from_the_read_so_its_loaded_value_is_not_kept(sqlite_db):
    # why reads._loaded_fields leaves keys out: the writes that look at loaded values refuse them
    row = Account.objects.get(pk=1)
    assert "id" not in saves.loaded_values(row) and saves.loaded_values(row)["owner"] == "owner1"
    with pytest.raises(ValueError):
        row.save(update_fields=["id"])
    with pytest.raises(ValueError):
        Account.objects.bulk_update([row], ["id"])


def test_iterator_rows_are_stamped_one_by_one(sqlite_db, txnsafety_violations):
    streamed = list(Account.objects.order_by("pk").iterator(chunk_size=2))
    assert all(txnsafety.read_stamp(row) is not None for row in streamed)
    assert saves.loaded_values(streamed[0])["balance"] == 100
    streamed[0].balance += 1
    streamed[0].save()
    assert txnsafety_violations.codes() == ["TXN102"]


def test_raw_rows_are_stamped(sqlite_db, txnsafety_violations):
    with transaction.atomic():
        (row,) = Account.objects.raw("SELECT * FROM django_app_account WHERE id = %s", [2])
    assert txnsafety.read_stamp(row).transaction is not None
    row.balance += 1
    row.save()
    assert txnsafety_violations.codes() == ["TXN104"]


def test_related_descriptors_and_prefetch_stamp_what_they_load(sqlite_db, txnsafety_violations):
    wallet = Wallet.objects.get(pk=1)
    with transaction.atomic():
        account = wallet.account                                   # a query of its own, inside
        owner = Account.objects.prefetch_related(Prefetch("wallet_set")).get(pk=1)
    assert txnsafety.read_stamp(account).transaction is not None
    (prefetched,) = owner.wallet_set.all()
    assert txnsafety.read_stamp(prefetched).transaction is not None
    prefetched.amount += 1
    prefetched.save()                                              # its transaction has ended
    assert txnsafety_violations.codes() == ["TXN104"]


def test_select_related_in_a_list_stamps_the_joined_objects(sqlite_db, txnsafety_violations):
    with transaction.atomic():
        (wallet,) = list(Wallet.objects.select_related("account"))
        root = transaction_for("default")
    assert txnsafety.read_stamp(wallet).transaction is root
    assert txnsafety.read_stamp(wallet.account).transaction is root
    assert saves.loaded_values(wallet.account)["balance"] == 100


def test_values_and_unchecked_models_add_no_stamps(sqlite_db):
    before = len(_scope().stamps)
    list(Account.objects.values("pk", "balance"))
    list(Account.objects.values_list("pk", flat=True))
    list(Plain.objects.all())
    assert len(_scope().stamps) == before


@pytest.mark.skipif(django.VERSION < (5, 1), reason="refresh_from_db(from_queryset=) is new in Django 5.1")
def test_a_refresh_through_a_list_query_keeps_its_temporary_out(sqlite_db, txnsafety_violations):
    account = Account.objects.get(pk=1)
    with transaction.atomic():
        account.refresh_from_db(from_queryset=Account.objects.filter(balance__gte=0))
        assert [entry[0] for entry in _scope().stamps.values()] == [account]  # the temporary left no stamp
        account.balance += 1
        account.save()
    assert txnsafety_violations.codes() == []


@pytest.mark.parametrize("enabled", [False, True])
def test_a_list_outside_the_checker_is_not_stamped(sqlite_db, enabled):
    from django.test import override_settings
    with override_settings(TXNSAFETY={"ENABLED": enabled}):
        rows = list(Account.objects.all())
        assert all((txnsafety.read_stamp(row) is not None) is enabled for row in rows)
        assert all((saves.loaded_token(row) is not None) is enabled for row in rows)


@pytest.fixture
def sites_as_in_production():
    """Read sites located as production does (none until a model had a violation), where
    consecutive statements may share one read (``_stamp_rows``)."""
    with production_read_sites():
        yield


def test_consecutive_statements_share_a_read_until_something_ticks(
        sqlite_db, txnsafety_violations, sites_as_in_production):
    with transaction.atomic():
        mine = list(Account.objects.order_by("pk"))[0]
        theirs = Account.objects.get(pk=mine.pk)                   # nothing between: the same read
        assert txnsafety.read_stamp(theirs).tick == txnsafety.read_stamp(mine).tick
        theirs.balance += 5
        theirs.save()
        again = Account.objects.get(pk=mine.pk)                    # read after theirs was written
        assert txnsafety.read_stamp(again).tick > txnsafety.read_stamp(theirs).tick
        again.note = again.note + "!"
        again.save()                                               # erases nothing: read after it
    assert txnsafety_violations.codes() == []
    assert Account.objects.get(pk=mine.pk).balance == mine.balance + 5
