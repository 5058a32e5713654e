"""The Django concurrency proof on MariaDB: N real requests through a real WSGI server.

The same views and interleaving as ``test_concurrency.py`` (a ``threading.Barrier``
after every request's read, or before it in the locking variants), on each way a
Django project meets MariaDB's isolation (the aliases of :mod:`.mariadb`).  A plain
read-modify-write inside ``atomic()`` loses N-1 increments at Django's READ COMMITTED
and at the server's own REPEATABLE READ, and every request is reported (TXN109); the
fixes lose nothing and report nothing.  The retrying transaction is safe only where
the database refuses the stale write: SERIALIZABLE (InnoDB's share-locking reads
deadlock and the losers retry) and ``innodb_snapshot_isolation``; the same code at the
default REPEATABLE READ never retries and loses the updates.  Isolation is judged
from each live connection.
"""
from __future__ import annotations

import threading

import pytest
from django.core.wsgi import get_wsgi_application
from django.db import connections, transaction

from fixtures.django_app.models import Counter, VersionedCounter
from fixtures.http_servers import concurrently, get_json, wsgi_server
from tests import servers
from tests.servers import missing
from txnsafety.django.transactions import MARIADB_SNAPSHOT, transaction_for

from .conftest import PG_DATABASE, _create_tables, assert_each_request_reported, reset_rows
from .mariadb import MYSQL_ALIASES, create_database, driver_installed

N = 6

#: (variant, alias) -> (where the barrier sits, expected lost updates, expected code per request)
CASES = {
    ("racy", "mysql"): ("after_read", N - 1, "TXN102"),
    ("racy_atomic", "mysql"): ("after_read", N - 1, "TXN109"),           # Django's READ COMMITTED
    ("racy_atomic", "mysql_rr"): ("after_read", N - 1, "TXN109"),        # MariaDB's REPEATABLE READ
    ("serializable", "mysql_rr"): ("after_read", N - 1, "TXN109"),       # a retry that never comes
    ("for_update", "mysql_rr"): ("before_read", 0, None),
    ("f", "mysql_rr"): ("before_read", 0, None),
    ("versioned", "mysql_rr"): ("after_read", 0, None),
    ("user_lock", "mysql_rr"): ("before_read", 0, None),
    ("serializable", "mysql_ser"): ("after_read", 0, None),
    ("serializable", "mysql_snap"): ("after_read", 0, None),
}


@pytest.fixture(scope="module")
def mysql_tables(mysql_url: str) -> str:
    if not driver_installed():
        missing("mysqlclient is not installed: pip install -e '.[test]' (it builds against libmariadb-dev)")
    create_database(servers.MYSQL_URL, PG_DATABASE)
    _create_tables("mysql")
    return "mysql"


@pytest.fixture
def mysql_db(mysql_tables: str):
    reset_rows("mysql")
    yield "mysql"
    for alias in MYSQL_ALIASES:
        connections[alias].close()


@pytest.fixture(scope="module")
def server_url():
    with wsgi_server(get_wsgi_application()) as url:
        yield url


@pytest.mark.parametrize("variant, alias", list(CASES), ids=[f"{v}-{a}" for v, a in CASES])
def test_counter_under_concurrent_requests(variant, alias, mysql_db, server_url, interleave, txnsafety_violations):
    point, expected_lost, code = CASES[variant, alias]
    model = VersionedCounter if variant == "versioned" else Counter
    barrier = threading.Barrier(N, timeout=60)   # the timeout only turns a bug into a failure, not a hang
    interleave["fn"] = lambda at: barrier.wait() if at == point else None

    results = concurrently(N, lambda i: get_json(f"{server_url}/{alias}/counter/{variant}/1/"))

    assert [status for status, _ in results] == [200] * N, results
    lost = N - model.objects.using("mysql").get(pk=1).value
    assert lost == expected_lost
    assert_each_request_reported(txnsafety_violations, code, N, variant)
    if variant in ("versioned", "serializable") and expected_lost == 0:
        assert sum(body["attempts"] for _, body in results) > N   # refused, retried, not lost


def test_isolation_is_judged_per_connection(mysql_tables):
    seen = {}
    for alias in MYSQL_ALIASES:
        with transaction.atomic(using=alias):
            txn = transaction_for(alias)
            seen[alias] = (txn.isolation, txn.prevents_lost_update)
        connections[alias].close()
    assert seen == {"mysql": ("read committed", False), "mysql_rr": ("repeatable read", False),
                    "mysql_ser": ("serializable", True), "mysql_snap": (MARIADB_SNAPSHOT, True)}
