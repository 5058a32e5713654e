"""TXN105 at run time on Django: an empty lookup, then an insert keyed on the same values.

The racy pair is reported with both sites, on SQLite (no transaction) and PostgreSQL
(even inside ``atomic()`` at READ COMMITTED or REPEATABLE READ); the pair made atomic
— a unique key, ``get_or_create()``, a lock held across both, a serializable
transaction, a row lock taken first — is not.  Two real concurrent requests show the
duplicate row being made, and the unique key preventing it.
"""
from __future__ import annotations

import asyncio
import os
import threading

import pytest
from django.db import IntegrityError, connections, transaction

import txnsafety
from fixtures.django_app.models import Account, Redemption, Signup, Wallet

HERE = os.path.abspath(__file__)


def _check(alias, how, owner="zed"):
    qs = Account.objects.using(alias).filter(owner=owner)
    if how == "exists":
        return qs.exists()
    if how == "first":
        return qs.first() is not None
    if how == "count":
        return qs.count() >= 1
    try:
        Account.objects.using(alias).get(owner=owner)
        return True
    except Account.DoesNotExist:
        return False


@pytest.mark.parametrize("how", ["exists", "first", "count", "get"])
def test_check_then_insert_is_reported_with_both_sites(db, how, txnsafety_violations):
    if not _check(db, how):                                    # the check
        Account.objects.using(db).create(pk=50, owner="zed")   # the act
    (violation,) = txnsafety_violations
    assert violation.code.value == "TXN105"
    assert violation.model == "django_app.Account"
    assert violation.read_site.file == HERE and violation.read_site.function == "_check"
    assert violation.write_site.file == HERE
    assert violation.write_site.function == "test_check_then_insert_is_reported_with_both_sites"
    assert violation.detail["keys"] == "owner"


def test_read_committed_and_repeatable_read_transactions_do_not_make_it_atomic(pg_db, txnsafety_violations):
    with transaction.atomic(using="pg"):                      # READ COMMITTED
        if not Account.objects.using("pg").filter(owner="zed").exists():
            Account.objects.using("pg").create(pk=50, owner="zed")
    assert txnsafety_violations.codes() == ["TXN105"]
    with transaction.atomic(using="pg_rr"):                   # REPEATABLE READ: no phantom protection
        if not Account.objects.using("pg_rr").filter(owner="amy").exists():
            Account.objects.using("pg_rr").create(pk=51, owner="amy")
    assert txnsafety_violations.codes() == ["TXN105", "TXN105"]


def test_a_count_of_some_rows_is_not_a_check(db, txnsafety_violations):
    """A count above zero may be compared with a limit, or only shown or asserted: not known."""
    assert Account.objects.using(db).filter(owner="owner1").count() == 1
    Account.objects.using(db).create(pk=50, owner="owner1")
    assert txnsafety_violations == []


def test_an_insert_keyed_on_other_values_is_not_the_act(db, txnsafety_violations):
    if not Account.objects.using(db).filter(owner="zed").exists():
        Account.objects.using(db).create(pk=50, owner="someone else")
    assert txnsafety_violations == []


def test_unique_field_and_unique_constraint_make_it_atomic(db, txnsafety_violations):
    if not Signup.objects.using(db).filter(email="a@example.org").exists():
        Signup.objects.using(db).create(email="a@example.org")
    if not Redemption.objects.using(db).filter(voucher="V1", user_id=7).exists():
        Redemption.objects.using(db).create(voucher="V1", user_id=7)
    assert txnsafety_violations == []
    # a unique key that the check does not cover: still racy
    if not Redemption.objects.using(db).filter(voucher="V2").exists():
        Redemption.objects.using(db).create(voucher="V2", user_id=8)
    assert txnsafety_violations.codes() == ["TXN105"]


def test_get_or_create_is_not_a_check_then_act(db, txnsafety_violations):
    Account.objects.using(db).get_or_create(owner="zed", defaults={"pk": 50})
    Account.objects.using(db).update_or_create(owner="amy", defaults={"pk": 51})
    assert txnsafety_violations == []


def test_a_lock_held_across_both_makes_it_atomic(db, txnsafety_violations):
    from txnsafety.locks import user_write_lock
    with user_write_lock("owner:zed"):
        if not Account.objects.using(db).filter(owner="zed").exists():
            Account.objects.using(db).create(pk=50, owner="zed")
    assert txnsafety_violations == []


def test_sqlite_transaction_serializes_the_pair(sqlite_db, txnsafety_violations):
    with transaction.atomic():
        if not Account.objects.filter(owner="zed").exists():
            Account.objects.create(pk=50, owner="zed")
    assert txnsafety_violations == []


def test_a_row_lock_taken_first_serializes_the_pair(pg_db, txnsafety_violations):
    with transaction.atomic(using=pg_db):
        Wallet.objects.using(pg_db).select_for_update().get(pk=1)      # the parent row, locked first
        if not Account.objects.using(pg_db).filter(owner="zed").exists():
            Account.objects.using(pg_db).create(pk=50, owner="zed")
    assert txnsafety_violations == []


# -- two real requests at once, on PostgreSQL ----------------------------------------------------

def _two_at_once(alias, model, field):
    """Both threads pass the check before either inserts (a barrier between the two halves)."""
    barrier = threading.Barrier(2)
    errors = []

    def request(pk: int) -> None:
        with txnsafety.request_scope("POST /signup/"):
            try:
                exists = model.objects.using(alias).filter(**{field: "dup"}).exists()
                barrier.wait()
                if not exists:
                    model.objects.using(alias).create(pk=pk, **{field: "dup"})
            except IntegrityError as exc:
                errors.append(exc)
            finally:
                connections[alias].close()

    threads = [threading.Thread(target=request, args=(pk,)) for pk in (60, 61)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return model.objects.using(alias).filter(**{field: "dup"}).count(), errors


def test_two_requests_both_pass_the_check_and_both_insert(pg_db, txnsafety_violations):
    rows, errors = _two_at_once(pg_db, Account, "owner")
    assert rows == 2 and errors == []                         # the duplicate is made
    assert txnsafety_violations.codes() == ["TXN105", "TXN105"]


def test_the_unique_key_turns_the_second_insert_into_an_error(pg_db, txnsafety_violations):
    rows, errors = _two_at_once(pg_db, Signup, "email")
    assert rows == 1 and len(errors) == 1
    assert txnsafety_violations == []


# -- what is not a pair (found on django-oscar's own suite) ---------------------------------------

def _validate(alias):
    """A validation: no row may exist yet (a parent product may have no stock records)."""
    if Account.objects.using(alias).filter(owner="zed").exists():
        raise ValueError("taken")


def _clean(alias):
    _validate(alias)


def test_a_check_whose_code_has_returned_does_not_pair_with_a_later_unrelated_insert(db, txnsafety_violations):
    _clean(db)                                                   # the check, in a call that returned
    Account.objects.using(db).create(pk=50, owner="zed")         # later code, not what it guarded
    assert txnsafety_violations == []
    if not Account.objects.using(db).filter(owner="amy").exists():   # the check's caller still runs
        Account.objects.using(db).create(pk=51, owner="amy")
    assert txnsafety_violations.codes() == ["TXN105"]


def test_a_count_of_none_shown_or_asserted_is_no_check(db, txnsafety_violations):
    assert Account.objects.using(db).filter(owner="zed").count() == 0
    shown = f"{Account.objects.using(db).filter(owner='zed').count()} accounts"
    Account.objects.using(db).create(pk=50, owner="zed")
    assert shown == "0 accounts" and txnsafety_violations == []
    if not Account.objects.using(db).filter(owner="amy").count():    # a branch on it: a check
        Account.objects.using(db).create(pk=51, owner="amy")
    assert txnsafety_violations.codes() == ["TXN105"]


def test_an_insert_by_get_or_create_acts_on_its_own_lookup_not_an_earlier_check(db, txnsafety_violations):
    try:
        Account.objects.using(db).get(owner="zed")               # an earlier lookup found nothing
    except Account.DoesNotExist:
        pass
    Account.objects.using(db).get_or_create(owner="zed", defaults={"pk": 50})   # looks again itself
    assert txnsafety_violations == []


# -- async: the check in an awaited helper coroutine ----------------------------------------------

async def _owner_taken(alias, owner):
    """The check, in a helper coroutine its caller awaits (the async ORM hops to a thread)."""
    return await Account.objects.using(alias).filter(owner=owner).aexists()


async def _signup(alias, pk, owner):
    if not await _owner_taken(alias, owner):                          # the check, in the helper
        await Account.objects.using(alias).acreate(pk=pk, owner=owner)  # the act, in its caller


async def _owner_taken_after_a_read(alias, owner):
    """The check is this helper's second hop from its own frame: the chain the first hop took
    (the helper, its caller, ...) serves the second (txnsafety/hops.py)."""
    await Account.objects.using(alias).aget(pk=1)
    return await Account.objects.using(alias).filter(owner=owner).aexists()


async def _signup_after_a_read(alias, pk, owner):
    if not await _owner_taken_after_a_read(alias, owner):             # the check, the helper's second hop
        await Account.objects.using(alias).acreate(pk=pk, owner=owner)  # the act, in its caller


async def _create_account(alias, pk, owner):
    await Account.objects.using(alias).acreate(pk=pk, owner=owner)


async def _signup_through_helpers(alias, pk, owner):
    if not await _owner_taken(alias, owner):                          # the check, in one helper
        await _create_account(alias, pk, owner)                       # the act, in another


async def _validate_owner(alias, owner):
    if await _owner_taken(alias, owner):
        raise ValueError("taken")


async def _unrelated(alias):
    await _validate_owner(alias, "zed")                               # a validation that returned
    await Account.objects.using(alias).acreate(pk=50, owner="zed")    # later code, not what it guarded


@pytest.mark.parametrize("signup", [_signup, _signup_through_helpers, _signup_after_a_read])
def test_a_check_in_an_awaited_helper_coroutine_pairs_with_its_callers_insert(db, signup, txnsafety_violations):
    async def main():
        with txnsafety.request_scope("POST /signup/"):
            await signup(db, 50, "zed")

    asyncio.run(main())
    (violation,) = txnsafety_violations
    assert violation.code.value == "TXN105" and violation.detail["check"] == "exists() false"
    assert violation.read_site.file == HERE and violation.read_site.function.startswith("_owner_taken")


def test_the_hops_kept_chain_is_let_go_when_the_request_ends(db, txnsafety_violations):
    """The chain a hop keeps for the next one (txnsafety/hops.py) holds the request's frames, which
    reference its task: the scope's end empties it, or only the garbage collector would free them."""
    from txnsafety import hops
    kept = []

    async def main():
        with txnsafety.request_scope("POST /signup/"):
            await _owner_taken_after_a_read(db, "amy")
            kept.append(hops._last_chain.get())
            assert kept[0] and kept[0][3][0].f_code.co_name == "_owner_taken_after_a_read"
        assert kept[0] == []

    asyncio.run(main())
    assert txnsafety_violations == []


def test_an_async_check_whose_code_has_returned_does_not_pair(db, txnsafety_violations):
    async def main():
        with txnsafety.request_scope("POST /signup/"):
            await _unrelated(db)

    asyncio.run(main())
    assert txnsafety_violations == []
