"""Writes the database makes safe are not reported; their racy twins are (SQLite and PostgreSQL).

Blind columns (a value not computed from the one loaded), and rows locked through a
joined eager load FOR UPDATE (unless ``of=`` limits the lock).
"""
from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.orm import contains_eager, joinedload

from fixtures.sqla_app.engines import sync_stack
from fixtures.sqla_app.models import Account, Entry

from .conftest import is_pg


@pytest.fixture
def stack(fresh_db):
    s = sync_stack(fresh_db)
    yield s
    s.dispose()


# -- blind writes -----------------------------------------------------------------------------

def test_blind_column_from_a_form_is_not_reported(stack, txnsafety_violations):
    with stack.Auto() as session:                        # no transaction at all
        account = session.get(Account, 1)
        account.owner = "a name typed in a form"
        session.commit()
    assert txnsafety_violations == []


def test_foreign_key_pointed_elsewhere_is_blind(stack, txnsafety_violations):
    with stack.Auto() as session:
        session.add(Account(id=2, balance=0))
        session.commit()
        entry = session.get(Entry, 1)
        entry.account_id = 2
        session.commit()
    assert txnsafety_violations == []


@pytest.mark.parametrize("change", ["append", "number", "mixed"])
def test_column_derived_from_the_read_is_reported(stack, change, txnsafety_violations):
    with stack.Auto() as session:
        account = session.get(Account, 1)                # owner "ann", balance 100
        if change == "append":
            account.owner = account.owner + " & bob"
        elif change == "number":
            account.balance = account.balance - 10
        else:                                            # one blind column does not excuse the other
            account.owner = "zed"
            account.balance += 1
        session.commit()
    assert txnsafety_violations.codes() == ["TXN102"]
    expected = {"append": "owner", "number": "balance", "mixed": "balance, owner"}[change]
    assert txnsafety_violations[0].detail["fields written"] == expected


# -- rows locked through a join -------------------------------------------------------------------

def _credit_through_join(stack, **of):
    with stack.Weak() as session:                        # READ COMMITTED on PostgreSQL
        entry = (session.query(Entry).options(joinedload(Entry.account, innerjoin=True))
                 .with_for_update(**of).filter(Entry.id == 1).one())
        entry.account.balance += 1
        entry.amount += 1
        session.commit()


def test_joined_eager_load_for_update_locks_the_joined_rows(stack, txnsafety_violations):
    if not is_pg(stack.url):
        pytest.skip("SQLite renders no FOR UPDATE (its own scenario is test_for_update_reads)")
    _credit_through_join(stack)
    assert txnsafety_violations == []


def test_for_update_of_one_table_leaves_the_joined_rows_unlocked(stack, txnsafety_violations):
    if not is_pg(stack.url):
        pytest.skip("SQLite renders no FOR UPDATE (its own scenario is test_for_update_reads)")
    _credit_through_join(stack, of=Entry)
    assert txnsafety_violations.codes() == ["TXN109"]
    assert txnsafety_violations[0].model.endswith("Account")


def test_for_update_of_the_joined_table_leaves_the_main_rows_unlocked(stack, txnsafety_violations):
    """(joinedload aliases the joined table, so OF names it through an explicit join.)"""
    if not is_pg(stack.url):
        pytest.skip("SQLite renders no FOR UPDATE (its own scenario is test_for_update_reads)")
    with stack.Weak() as session:
        entry = session.scalars(
            select(Entry).join(Entry.account).options(contains_eager(Entry.account))
            .where(Entry.id == 1).with_for_update(of=Account)).one()
        entry.account.balance += 1                        # locked: safe
        session.flush()
        assert txnsafety_violations == []
        entry.amount += 1                                 # read, not locked
        session.commit()
    assert txnsafety_violations.codes() == ["TXN109"]
    assert txnsafety_violations[0].model.endswith("Entry")


# -- the write's read, taken on the common path (no read site wanted) --------------------------------

@pytest.mark.parametrize("locked", [True, False])
def test_a_row_read_for_update_is_safe_to_write(stack, locked, read_sites, txnsafety_violations):
    """events._judge_update takes the statement's read inline when no read site is wanted (no
    violation of the model yet, as in production): FOR UPDATE must come with it."""
    if not is_pg(stack.url):
        pytest.skip("SQLite renders no FOR UPDATE (its own scenario is test_for_update_reads)")
    with stack.Weak() as session:                        # READ COMMITTED: only the row lock protects
        query = select(Account).where(Account.id == 1)
        account = session.scalars(query.with_for_update() if locked else query).one()
        account.balance += 1
        session.commit()
    assert txnsafety_violations.codes() == ([] if locked else ["TXN109"])
