"""A project's own lock, declared, counts as a lock (SQLite and PostgreSQL, real memcached).

The project serialises a sign-up with a cache ``add()`` of a lock key (memcached's
``add`` succeeds for one caller only), then checks for the e-mail and inserts it.  The
checker cannot tell that ``add()`` from any other call: undeclared, the check-then-act is
reported (TXN105).  Declared with :func:`txnsafety.serializing` (the project's context
manager) or :func:`txnsafety.declared_lock` (a block inside it), it is not; a check made
under the lock and an insert made after its release still is.  A read-modify-write of a
model written under a user lock counts the declared lock whose key is the model's lock id.
"""
from __future__ import annotations

import uuid
from contextlib import contextmanager
from urllib.parse import urlsplit

import pytest
from pymemcache.client.base import Client
from sqlalchemy import Column, Integer, String, select

import txnsafety
from fixtures.sqla_app.engines import sync_stack
from fixtures.sqla_app.models import Base


@txnsafety.written_in_transaction()
class Signup(Base):
    """No unique key on ``email``: a look-up, then an insert of it, is a check-then-act."""

    __tablename__ = "declared_signup"
    id = Column(Integer, primary_key=True, autoincrement=False)
    email = Column(String(100), nullable=False)


@txnsafety.written_with_user_lock(lambda wallet: f"wallet:{wallet.id}")
class Wallet(Base):
    __tablename__ = "declared_wallet"
    id = Column(Integer, primary_key=True, autoincrement=False)
    balance = Column(Integer, nullable=False)


class Busy(Exception):
    pass


@pytest.fixture
def cache(memcached_url):
    parts = urlsplit(memcached_url)
    client = Client((parts.hostname, parts.port or 11211))
    yield client
    client.close()


@pytest.fixture
def project_lock(cache):
    """The project's own lock: a cache ``add()`` of the key, deleted on the way out."""
    prefix = uuid.uuid4().hex  # tests sharing the server do not share keys

    @contextmanager
    def cache_lock(name):
        key = f"{prefix}:{name}"
        if not cache.add(key, b"1", expire=30, noreply=False):
            raise Busy(name)
        try:
            yield
        finally:
            cache.delete(key)
    return cache_lock


@pytest.fixture
def stack(fresh_db):
    s = sync_stack(fresh_db)
    with s.plain.begin() as conn:
        for table in (Signup.__table__, Wallet.__table__):
            table.create(conn, checkfirst=True)
            conn.execute(table.delete())
        conn.execute(Wallet.__table__.insert(), [{"id": 1, "balance": 100}])
    yield s
    s.dispose()


def _registered(session, email):
    return session.scalars(select(Signup).where(Signup.email == email)).first() is not None


def _sign_up(session, email, pk=1):
    if not _registered(session, email):
        session.add(Signup(id=pk, email=email))
        session.commit()


def test_the_projects_lock_undeclared_is_not_seen(stack, project_lock, txnsafety_violations):
    with project_lock("zed@example.org"), stack.Auto() as session:
        _sign_up(session, "zed@example.org")
    assert txnsafety_violations.codes() == ["TXN105"]


def test_the_projects_lock_declared_makes_the_pair_atomic(stack, project_lock, txnsafety_violations):
    lock = txnsafety.serializing(project_lock)
    with lock("zed@example.org") as entered, stack.Auto() as session:
        assert entered is None                                     # what the project's lock yields
        assert [lease.key for lease in txnsafety.held_leases()] == ["cache_lock:zed@example.org"]
        _sign_up(session, "zed@example.org")
    assert txnsafety.held_leases() == ()
    with project_lock("amy@example.org"), txnsafety.declared_lock("signup:amy"), stack.Auto() as session:
        _sign_up(session, "amy@example.org", pk=2)
    assert txnsafety_violations == []


def test_a_lock_the_project_failed_to_take_declares_nothing(stack, project_lock, txnsafety_violations):
    lock = txnsafety.serializing(project_lock)
    with project_lock("zed@example.org"):
        with pytest.raises(Busy), lock("zed@example.org"):
            pass
        assert txnsafety.held_leases() == ()


def test_a_check_under_the_lock_and_an_insert_after_it_is_reported(stack, project_lock, txnsafety_violations):
    lock = txnsafety.serializing(project_lock)
    with stack.Auto() as session:
        with lock("zed@example.org"):
            registered = _registered(session, "zed@example.org")
        if not registered:
            session.add(Signup(id=1, email="zed@example.org"))
            session.commit()
    assert txnsafety_violations.codes() == ["TXN105"]


@pytest.mark.parametrize("declared, expected", [(None, ["TXN102"]), ("wallet:1", []), ("wallet:2", ["TXN102"])])
def test_a_read_modify_write_counts_the_declared_lock_of_its_id(
        stack, project_lock, declared, expected, txnsafety_violations):
    lock = txnsafety.serializing(project_lock, key=lambda name: name)
    with (lock(declared) if declared else project_lock("wallet:1")), stack.Auto() as session:
        wallet = session.get(Wallet, 1)
        wallet.balance = wallet.balance - 10
        session.commit()
    assert txnsafety_violations.codes() == expected
