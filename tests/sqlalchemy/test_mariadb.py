"""MariaDB: its default REPEATABLE READ loses updates, and the checker says so.

A Flask-SQLAlchemy app wired as the README says (``db.session``, the server's default
isolation, REPEATABLE READ), served by waitress with N worker threads; N client
threads POST at once and a ``threading.Barrier`` in the handler makes every request
read before any writes.  Unlike PostgreSQL's REPEATABLE READ, InnoDB's lets the
second writer overwrite the first: N-1 increments are lost and every request is
reported (TXN109).  The fixes lose nothing and report nothing: ``FOR UPDATE``, an
atomic ``UPDATE``, a version column, the user write lock; and, for the same racy code
with a retry, SERIALIZABLE (InnoDB makes the reads share-locking: the losers deadlock
and retry) or MariaDB's ``innodb_snapshot_isolation`` (the losers get "Record has
changed since last read" and retry), each judged from the connection itself.
"""
from __future__ import annotations

import os
import threading
import uuid
from typing import Any, Iterator

import httpx
import pytest
from sqlalchemy import create_engine, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import sessionmaker

import txnsafety
from fixtures.sqla_app import counters
from fixtures.sqla_app.models import Counter, reset
from txnsafety.sqlalchemy import instrument, transaction_of
from txnsafety.sqlalchemy.isolation import MARIADB_SNAPSHOT
from txnsafety.wsgi import TxnSafetyMiddleware

from tests.servers import missing

from .conftest import serve_wsgi, stop_wsgi

flask = pytest.importorskip("flask")
flask_sqlalchemy = pytest.importorskip("flask_sqlalchemy")

N = 6
SNAPSHOT_ON = {"init_command": "SET SESSION innodb_snapshot_isolation=ON"}


@pytest.fixture(scope="module")
def maria_url(mysql_url: str) -> Iterator[str]:
    """A database of this run alone on the MariaDB server (created here, dropped at the end)."""
    try:
        import MySQLdb  # noqa: F401  (mysqlclient, the test extra's MySQL driver)
    except ImportError:
        missing("mysqlclient is not installed: pip install -e '.[test]' (it builds against libmariadb-dev)")
    admin = make_url(mysql_url).set(drivername="mysql+mysqldb")
    name = f"txnsafety_sqla_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    engine = create_engine(admin)
    with engine.begin() as conn:
        conn.execute(text(f"CREATE DATABASE `{name}`"))
    url = admin.set(database=name).render_as_string(hide_password=False)
    yield url
    with engine.begin() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS `{name}`"))
    engine.dispose()


def racy_with_retry(session: Any, barrier: Any) -> int:
    """The racy increment, retried when the database refuses a write (deadlock, changed record)."""
    attempts = 0
    while True:
        attempts += 1
        try:
            counter = session.get(Counter, 1, populate_existing=True)
            if attempts == 1:
                barrier.wait(counters.WAIT)
            counter.n += 1
            session.commit()
            return attempts
        except OperationalError:
            session.rollback()


def create_app(url: str) -> Any:
    """The README's wiring; ``db.session`` runs at the server's default isolation."""
    db = flask_sqlalchemy.SQLAlchemy()
    app = flask.Flask(__name__)
    app.config.update(SQLALCHEMY_DATABASE_URI=url,
                      SQLALCHEMY_ENGINE_OPTIONS={"pool_size": N + 2, "max_overflow": 4})
    db.init_app(app)
    instrument(db)
    with app.app_context():
        serializable = instrument(sessionmaker(db.engine.execution_options(isolation_level="SERIALIZABLE")))
    snapshot_engine = create_engine(url, pool_size=N + 2, connect_args=SNAPSHOT_ON)
    snapshot = instrument(sessionmaker(snapshot_engine))
    sessions = {"default": lambda: db.session, "serializable": serializable, "snapshot": snapshot}

    @app.post("/counter/<config>/<variant>")
    def counter(config: str, variant: str) -> Any:
        session = sessions[config]()
        barrier = app.config["TXNSAFETY_BARRIER"]
        try:
            if variant == "racy_retry":
                attempts = racy_with_retry(session, barrier)
            else:
                attempts = counters.increment(session, variant, barrier)
        finally:
            session.close()
        return {"attempts": attempts}

    app.wsgi_app = TxnSafetyMiddleware(app.wsgi_app)
    app.extensions["snapshot_engine"] = snapshot_engine
    app.extensions["db"] = db
    return app


@pytest.fixture(scope="module")
def served(maria_url: str) -> Iterator[tuple[str, Any]]:
    plain = create_engine(maria_url)
    with plain.begin() as conn:
        reset(conn)
    app = create_app(maria_url)
    server, base = serve_wsgi(app, threads=N + 2)
    yield base, app, plain
    stop_wsgi(server)
    app.extensions["snapshot_engine"].dispose()
    with app.app_context():
        app.extensions["db"].engine.dispose()
    plain.dispose()


def hammer(served: Any, config: str, variant: str) -> tuple[list[httpx.Response], int]:
    """N concurrent POSTs; returns the responses and the counter's final value."""
    base, app, plain = served
    with plain.begin() as conn:
        reset(conn)
    app.config["TXNSAFETY_BARRIER"] = threading.Barrier(N)
    responses: list[httpx.Response] = []
    lock = threading.Lock()

    def one() -> None:
        with httpx.Client(base_url=base, timeout=120) as client:
            response = client.post(f"/counter/{config}/{variant}")
        with lock:
            responses.append(response)

    threads = [threading.Thread(target=one) for _ in range(N)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)
    app.config["TXNSAFETY_BARRIER"] = None
    assert len(responses) == N
    model = counters.MODELS.get(variant, Counter)
    with plain.connect() as conn:
        final = conn.execute(select(model.__table__.c.n).where(model.__table__.c.id == 1)).scalar_one()
    return responses, final


@pytest.mark.parametrize("config, variant", [("default", "racy"), ("default", "racy_retry")])
def test_repeatable_read_loses_updates_and_every_request_is_reported(served, config, variant, txnsafety_violations):
    responses, final = hammer(served, config, variant)
    assert [r.status_code for r in responses] == [200] * N, [r.text for r in responses]
    assert N - final == N - 1                                 # the lost update, happening
    assert [r.json()["attempts"] for r in responses] == [1] * N  # nothing refused a write
    assert txnsafety_violations.codes() == ["TXN109"] * N
    assert len({v.request_id for v in txnsafety_violations}) == N
    assert all("REPEATABLE READ" in v.message for v in txnsafety_violations)


@pytest.mark.parametrize("config, variant", [
    ("default", "for_update"), ("default", "atomic"), ("default", "versioned"), ("default", "user_lock"),
    ("serializable", "racy_retry"), ("snapshot", "racy_retry"),
])
def test_the_fixes_lose_nothing_and_report_nothing(served, config, variant, txnsafety_violations):
    responses, final = hammer(served, config, variant)
    assert [r.status_code for r in responses] == [200] * N, [r.text for r in responses]
    assert final == N                                         # then not
    assert txnsafety_violations == []
    if variant in ("versioned", "racy_retry"):               # the losers really were refused, and retried
        assert sum(r.json()["attempts"] for r in responses) > N


def test_isolation_is_judged_per_connection(served, maria_url):
    """The verdicts the checker took from the connections (the server's default level, an
    execution option, a session variable set at connect)."""
    _, app, _ = served
    seen = {}
    snapshot_engine = app.extensions["snapshot_engine"]
    engines = {"default": create_engine(maria_url),
               "read committed": create_engine(maria_url, isolation_level="READ COMMITTED"),
               "serializable": create_engine(maria_url, isolation_level="SERIALIZABLE"),
               "snapshot": snapshot_engine}
    try:
        for name, engine in engines.items():
            with txnsafety.request_scope(name), instrument(sessionmaker(engine))() as session:
                session.get(Counter, 1)
                txn = transaction_of(session)
                seen[name] = (txn.isolation, txn.prevents_lost_update)
    finally:
        for engine in engines.values():
            if engine is not snapshot_engine:
                engine.dispose()
    assert seen == {"default": ("REPEATABLE READ", False), "read committed": ("READ COMMITTED", False),
                    "serializable": ("SERIALIZABLE", True), "snapshot": (MARIADB_SNAPSHOT, True)}
