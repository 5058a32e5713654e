"""``Session.merge()`` of a copy read in an earlier request (cached, pickled or detached)
writes the copy's older values: reported.  Refreshing the merged object first is the
safe twin.  SQLite and PostgreSQL (the ``Main`` Sessions: transactions that prevent
lost updates, so only the stale copy can lose one)."""
from __future__ import annotations

import pickle

import pytest
from sqlalchemy import update

import txnsafety
from fixtures.sqla_app.models import Account


def _cache_in_a_first_request(stack, pickled):
    with txnsafety.request_scope("GET /account/1/"):
        with stack.Main() as session:
            account = session.get(Account, 1)              # detached, values kept, when the Session closes
    return pickle.dumps(account) if pickled else account


def _another_writer(stack):
    with stack.plain.begin() as conn:
        conn.execute(update(Account).where(Account.id == 1).values(balance=Account.balance + 5))


def _balance(stack):
    with stack.Main() as session:
        return session.get(Account, 1).balance


@pytest.mark.parametrize("pickled", [True, False], ids=["pickled", "detached"])
@pytest.mark.parametrize("load", [True, False], ids=["load", "no-load"])
def test_merge_of_a_copy_from_an_earlier_request_is_reported(stack, pickled, load, txnsafety_violations):
    cached = _cache_in_a_first_request(stack, pickled)
    _another_writer(stack)
    with txnsafety.request_scope("POST /account/1/credit/"):
        with stack.Main() as session:
            account = session.merge(pickle.loads(cached) if pickled else cached, load=load)
            account.balance += 1
            session.commit()
    assert _balance(stack) == 101                              # the other writer's +5 is lost
    assert txnsafety_violations.codes() == ["TXN101"]          # read outside this request's transaction


def test_merged_copy_refreshed_before_the_write_is_safe(stack, txnsafety_violations):
    cached = _cache_in_a_first_request(stack, pickled=True)
    _another_writer(stack)
    with txnsafety.request_scope("POST /account/1/credit/"):
        with stack.Main() as session:
            account = session.merge(pickle.loads(cached))
            session.refresh(account)                           # re-read inside the transaction
            account.balance += 1
            session.commit()
    assert _balance(stack) == 106
    assert txnsafety_violations == []


def test_merge_of_a_copy_read_in_another_transaction_of_this_request_is_txn104(stack, txnsafety_violations):
    with stack.Main() as first:
        copy = first.get(Account, 1)
    with stack.Main() as second:
        account = second.merge(copy)
        account.balance += 1
        second.commit()
    assert txnsafety_violations.codes() == ["TXN104"]


def test_merge_of_a_new_object_built_by_hand_carries_no_read(stack, txnsafety_violations):
    with stack.Main() as session:
        session.merge(Account(id=1, owner="set by hand"))
        session.commit()
    assert txnsafety_violations == []
