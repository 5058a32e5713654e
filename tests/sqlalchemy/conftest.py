"""Real databases and real servers for the SQLAlchemy integration tests.

* ``db_url``: every test that asks for it runs on SQLite (a file, WAL) and on the
  PostgreSQL server of ``tests/conftest.py`` (database ``txnsafety_sqla``, ours alone).
* ``flask_server`` / ``asgi_server``: the example apps of ``fixtures/sqla_app``
  served by waitress / uvicorn in a thread, one per database for the session;
  the rows are put back before each test.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import socket
import tempfile
import threading
import uuid
from typing import Any, Iterator

import httpx
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from fixtures.sqla_app.models import reset

DATABASE = "txnsafety_sqla"


def _pid_alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


@pytest.fixture(scope="session")
def pg_url(postgres_url: str) -> Iterator[str]:
    """``postgresql+psycopg://…/txnsafety_sqla_<run>``: a database of this test run alone
    (created here, dropped at the end), so that concurrent runs cannot disturb each other."""
    admin = make_url(postgres_url).set(drivername="postgresql+psycopg")
    name = f"{DATABASE}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    engine = create_engine(admin, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        for (old,) in conn.execute(text("select datname from pg_database where datname like :p"),
                                   {"p": f"{DATABASE}_%"}):
            if not _pid_alive(old.split("_")[2]):   # left behind by a run that was killed
                conn.execute(text(f'drop database if exists "{old}" with (force)'))
        conn.execute(text(f'create database "{name}"'))
    yield admin.set(database=name).render_as_string(hide_password=False)
    with engine.connect() as conn:
        conn.execute(text(f'drop database if exists "{name}" with (force)'))
    engine.dispose()


@pytest.fixture(scope="session")
def sqlite_url() -> Iterator[str]:
    """A SQLite file in a directory of this run alone (pytest's numbered temp
    directories are pruned by concurrent runs)."""
    directory = tempfile.mkdtemp(prefix="txnsafety-sqla-")
    yield f"sqlite:///{os.path.join(directory, 'app.sqlite3')}"
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session", params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest) -> str:
    return request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")


def is_pg(url: str) -> bool:
    return url.startswith("postgresql")


def reset_rows(url: str) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        reset(conn)
    engine.dispose()


@pytest.fixture
def fresh_db(db_url: str) -> str:
    reset_rows(db_url)
    return db_url


@pytest.fixture
def stack(fresh_db: str) -> Iterator[Any]:
    """The app's engines and sessions on a fresh database (a module that needs tables of its
    own defines its own ``stack``)."""
    from fixtures.sqla_app.engines import sync_stack
    s = sync_stack(fresh_db)
    yield s
    s.dispose()


@pytest.fixture
def sample_rate() -> Iterator[Any]:
    """Set ``sample_rate`` for one test; every request checked again after it."""
    import txnsafety
    yield lambda rate: txnsafety.configure(sample_rate=rate)
    txnsafety.configure(sample_rate=1.0)


# -- servers ------------------------------------------------------------------------

class Served:
    """A running app: ``client`` talks HTTP to it."""

    def __init__(self, base_url: str, url: str, app: Any) -> None:
        self.base_url, self.url, self.app = base_url, url, app
        self.client = httpx.Client(base_url=base_url, timeout=60)

    def post(self, path: str, **params: str) -> httpx.Response:
        return self.client.post(path, params=params)

    def value(self, model: str) -> dict[str, Any]:
        response = self.client.get(f"/value/{model}")
        assert response.status_code == 200, response.text
        return response.json()


def serve_wsgi(app: Any, threads: int = 4) -> tuple[Any, str]:
    from waitress.server import create_server
    server = create_server(app, host="127.0.0.1", port=0, threads=threads)
    server.txnsafety_thread = threading.Thread(target=server.run, name="waitress", daemon=True)
    server.txnsafety_thread.start()
    return server, f"http://127.0.0.1:{server.effective_port}"


def stop_wsgi(server: Any) -> None:
    """Close the listener and the trigger from the server's own loop (its loop then ends)."""
    def stop() -> None:
        server.close()
        server.trigger.close()
    server.trigger.pull_trigger(stop)
    server.txnsafety_thread.join(30)
    server.task_dispatcher.shutdown()


def serve_asgi(app: Any) -> tuple[Any, threading.Thread, str]:
    import uvicorn
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # listening now: requests queue until uvicorn accepts them
    server = uvicorn.Server(uvicorn.Config(app, lifespan="on", log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="uvicorn", daemon=True)
    thread.start()
    return server, thread, f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture(scope="session")
def flask_server(db_url: str) -> Iterator[Served]:
    from fixtures.sqla_app.flask_app import create_app
    reset_rows(db_url)
    app = create_app(db_url, pool_size=12)
    server, base = serve_wsgi(app, threads=12)
    served = Served(base, db_url, app)
    yield served
    served.client.close()
    stop_wsgi(server)
    app.extensions["sqla_stack"].dispose()
    with app.app_context():
        app.extensions["sqlalchemy"].engines[None].dispose()


@pytest.fixture(scope="session")
def asgi_server(db_url: str) -> Iterator[Served]:
    from fixtures.sqla_app.asgi_app import create_app
    reset_rows(db_url)
    app = create_app(db_url)
    server, thread, base = serve_asgi(app)
    served = Served(base, db_url, app)
    yield served
    served.client.close()
    server.should_exit = True
    thread.join(30)


@pytest.fixture(params=["flask", "asgi"])
def web_app(request: pytest.FixtureRequest, db_url: str) -> Served:
    """Each example app (Flask-SQLAlchemy/waitress, ASGI/uvicorn) on each database, rows reset."""
    served = request.getfixturevalue("flask_server" if request.param == "flask" else "asgi_server")
    reset_rows(served.url)
    return served


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture(params=["always", "adaptive"])
def read_sites(request: Any) -> Iterator[str]:
    """Run a test with every read located (the pytest plugin's setting) and as production runs,
    where no read is located until its model had a violation: the integration notes the
    common statement on a path of its own then (txnsafety/sqlalchemy/reads.py ``_instances``)."""
    import txnsafety
    from txnsafety.sites import sites_wanted
    before, wanted = txnsafety.settings.read_sites, set(sites_wanted)
    if request.param == "adaptive":
        sites_wanted.clear()                              # what earlier tests' violations asked for
    txnsafety.configure(read_sites=request.param)
    try:
        yield request.param
    finally:
        txnsafety.configure(read_sites=before)
        sites_wanted.update(wanted)
