"""The checker's cost on the request shapes SQLAlchemy users write (issue 33), SQLite or PostgreSQL.

Every shape serves the same view, written in its own idiom, as a new user writes it from
the README: 11 reads of one row by primary key (one of them ``FOR UPDATE``), two
``select()`` statements returning 5 and 4 rows, 5 of the objects modified, one commit,
a JSON response.  The shapes (:data:`SHAPES`):

* ``get``            — SQLAlchemy 2.x ``session.get(Item, pk)``, WSGI (webob);
* ``flask-get``      — the same view in Flask-SQLAlchemy (``db.session.get``), a Flask app;
* ``scalars``        — ``session.scalars(select(Item).where(Item.id == pk)).one()``, WSGI;
* ``filter-by-first`` — ``session.query(Item).filter_by(id=pk).first()`` (legacy Query), WSGI;
* ``async-get``      — ``await session.get(...)`` on an ``AsyncSession`` (aiosqlite / psycopg),
  an ASGI app served on one event loop.

Each shape is timed side by side (``_compare.py``: rotating rounds, a forked child per
contender, pooled fresh processes) in four states:

* ``bare``    — txnsafety's listeners removed, no middleware, nothing instrumented;
* ``off``     — the checked app, ``ENABLED`` false: installed but switched off;
* ``checked`` — ``instrument()``, the app behind txnsafety's middleware, every request checked;
* ``sampled`` — the same with ``sample_rate`` 0.1: a tenth of the requests checked.

``--loop SHAPE:STATE --calls N`` serves one contender untimed (``count_instructions.py``
counts its instructions under valgrind); ``--list`` names them.  The requests are safe
(REPEATABLE READ on PostgreSQL, real transactions on SQLite): a report fails the run.

    python benchmarks/bench_shapes.py [--rounds 40] [--per-round 3] [--processes 5] [--only get]
    python benchmarks/bench_shapes.py --postgres postgresql://USER:PASSWORD@HOST:5432/DB
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from dataclasses import dataclass
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sqlalchemy import event, select  # noqa: E402
from sqlalchemy.orm import sessionmaker  # noqa: E402
from webob import Response  # noqa: E402

import txnsafety  # noqa: E402
from txnsafety.asgi import TxnSafetyASGIMiddleware  # noqa: E402
from txnsafety.sqlalchemy import instrument, sqlite_transactions  # noqa: E402
from txnsafety.wsgi import TxnSafetyMiddleware  # noqa: E402
from benchmarks import bench_sqlalchemy as sa  # noqa: E402
from benchmarks._compare import Contender, compare, serve_untimed, start  # noqa: E402
from benchmarks._shape_args import shape_arguments  # noqa: E402

Item = sa.Item
#: The primary keys the view reads one by one; the last is read FOR UPDATE.
KEYS = range(1, 12)
#: The rows the two select() statements return.
FIVE, FOUR = (12, 16), (17, 20)
#: The share of requests the ``sampled`` state checks.
SAMPLE_RATE = 0.1
STATES = ("bare", "off", "checked", "sampled")


def _json(items: list[Any]) -> dict[str, Any]:
    for item in items[:5]:
        item.quantity += 1
    return {"items": [{"id": i.id, "quantity": i.quantity, "note": i.note} for i in items]}


def _lists(session: Any) -> list[Any]:
    five = session.scalars(select(Item).where(Item.id.between(*FIVE)).order_by(Item.id)).all()
    return five + session.scalars(select(Item).where(Item.id.between(*FOUR)).order_by(Item.id)).all()


# -- the views, one per shape ------------------------------------------------------------------------

def get_view(session: Any) -> dict[str, Any]:
    items = [session.get(Item, pk) for pk in KEYS[:-1]]
    items.append(session.get(Item, KEYS[-1], with_for_update=True))
    items += _lists(session)
    result = _json(items)
    session.commit()
    return result


def scalars_view(session: Any) -> dict[str, Any]:
    items = [session.scalars(select(Item).where(Item.id == pk)).one() for pk in KEYS[:-1]]
    items.append(session.scalars(select(Item).where(Item.id == KEYS[-1]).with_for_update()).one())
    items += _lists(session)
    result = _json(items)
    session.commit()
    return result


def filter_by_first_view(session: Any) -> dict[str, Any]:
    items = [session.query(Item).filter_by(id=pk).first() for pk in KEYS[:-1]]
    items.append(session.query(Item).filter_by(id=KEYS[-1]).with_for_update().first())
    items += session.query(Item).filter(Item.id.between(*FIVE)).order_by(Item.id).all()
    items += session.query(Item).filter(Item.id.between(*FOUR)).order_by(Item.id).all()
    result = _json(items)
    session.commit()
    return result


async def async_get_view(session: Any) -> dict[str, Any]:
    items = [await session.get(Item, pk) for pk in KEYS[:-1]]
    items.append(await session.get(Item, KEYS[-1], with_for_update=True))
    items += (await session.scalars(select(Item).where(Item.id.between(*FIVE)).order_by(Item.id))).all()
    items += (await session.scalars(select(Item).where(Item.id.between(*FOUR)).order_by(Item.id))).all()
    result = _json(items)
    await session.commit()
    return result


# -- the apps ------------------------------------------------------------------------------------------

def _wsgi(view: Callable[[Any], dict[str, Any]], maker: sessionmaker, checked: bool) -> Callable[[], None]:
    def app(environ: Any, start_response: Any) -> Any:
        with maker() as session:
            return Response(json=view(session))(environ, start_response)
    return sa._calling(TxnSafetyMiddleware(app) if checked else app)


def _flask(url: str, checked: bool) -> Callable[[], None]:
    """A Flask-SQLAlchemy app of its own (its own Session class: instrumenting one app's
    ``db`` leaves the other's alone), wired as the README says when ``checked``."""
    from flask import Flask
    from flask_sqlalchemy import SQLAlchemy
    from flask_sqlalchemy.session import Session as FlaskSession

    session_class = type("CheckedFlaskSession" if checked else "PlainFlaskSession", (FlaskSession,), {})
    db = SQLAlchemy(session_options={"class_": session_class})
    app = Flask(f"bench_flask_{'checked' if checked else 'plain'}")
    app.config.update(SQLALCHEMY_DATABASE_URI=url, SQLALCHEMY_ENGINE_OPTIONS=_engine_options(url))
    db.init_app(app)
    with app.app_context():
        _prepare(db.engine)
        os.register_at_fork(before=db.engine.dispose)

    @app.get("/cart")
    def cart() -> Any:
        return get_view(db.session)

    if checked:
        instrument(db)
        app.wsgi_app = TxnSafetyMiddleware(app.wsgi_app)  # type: ignore[method-assign]
    return sa._calling(app)


def _asgi(url: str, checked: bool) -> Callable[[], None]:
    from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

    engine = create_async_engine(_async_url(url), **_engine_options(url))
    _prepare(engine.sync_engine)
    maker = async_sessionmaker(engine, expire_on_commit=True)
    if checked:
        instrument(maker)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        async with maker() as session:
            body = Response(json=await async_get_view(session)).body
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})

    served = TxnSafetyASGIMiddleware(app) if checked else app
    scope = {"type": "http", "method": "GET", "path": "/cart", "headers": [], "query_string": b""}
    loop = asyncio.new_event_loop()
    os.register_at_fork(before=lambda: loop.run_until_complete(engine.dispose()))

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    def request() -> None:
        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)
        loop.run_until_complete(served(scope, receive, send))
        assert sent[0]["status"] == 200, sent
    return request


def _engine_options(url: str) -> dict[str, Any]:
    return {"isolation_level": "REPEATABLE READ"} if url.startswith("postgresql") else {}


def _async_url(url: str) -> str:
    return url.replace("sqlite://", "sqlite+aiosqlite://", 1) if url.startswith("sqlite") else url


def _prepare(engine: Any) -> None:
    """SQLite as ``bench_sqlalchemy.make_engine`` runs it: WAL, real transactions."""
    if engine.dialect.name != "sqlite":
        return
    sqlite_transactions(engine)

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection: Any, record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()


# -- the shapes and their contenders -------------------------------------------------------------------

@dataclass(frozen=True)
class Shape:
    """One way of writing the view: ``make(engine, url, checked)`` gives a request to call."""

    name: str
    title: str
    make: Callable[[Any, str, bool], Callable[[], None]]


def _session_shape(view: Callable[[Any], dict[str, Any]]) -> Callable[[Any, str, bool], Callable[[], None]]:
    def make(engine: Any, url: str, checked: bool) -> Callable[[], None]:
        maker = sessionmaker(engine)
        return _wsgi(view, instrument(maker) if checked else maker, checked)
    return make


SHAPES = (
    Shape("get", "session.get() x 11 (one FOR UPDATE), 2 select()s, 5 writes (SQLAlchemy 2.x, WSGI)",
          _session_shape(get_view)),
    Shape("flask-get", "the same view in Flask-SQLAlchemy (db.session.get, Flask)",
          lambda engine, url, checked: _flask(url, checked)),
    Shape("scalars", "session.scalars(select().where(id == pk)).one() x 11, 2 select()s, 5 writes (WSGI)",
          _session_shape(scalars_view)),
    Shape("filter-by-first", "session.query().filter_by(id=pk).first() x 11, 2 queries, 5 writes (WSGI)",
          _session_shape(filter_by_first_view)),
    Shape("async-get", "await AsyncSession.get() x 11, 2 select()s, 5 writes (ASGI, one event loop)",
          lambda engine, url, checked: _asgi(url, checked)),
)


def _state(state: str, sample_rate: float) -> Callable[[], None]:
    """A contender's setup: txnsafety's listeners installed or removed, the checker on or off, the rate."""
    def setup() -> None:
        on = state != "bare"
        sa._listeners(on)()
        txnsafety.settings.enabled = state != "off"
        txnsafety.settings.sample_rate = sample_rate if state == "sampled" else 1.0
    return setup


def contenders(shape: Shape, engine: Any, url: str, sample_rate: float = SAMPLE_RATE) -> dict[str, Contender]:
    bare, checked = shape.make(engine, url, False), shape.make(engine, url, True)
    return {state: Contender(bare if state == "bare" else checked, _state(state, sample_rate)) for state in STATES}


def main() -> None:
    args = shape_arguments(__doc__, [shape.name for shape in SHAPES], STATES, SAMPLE_RATE)
    if args is None:
        return
    if not args.loop:
        start(args)
    no_reports = sa.watch_reports()
    with tempfile.TemporaryDirectory() as tmp:
        engine = sa.prepared_engine(tmp, args.postgres)   # the items, in a private database on PostgreSQL
        url = engine.url.render_as_string(hide_password=False)
        try:
            if args.loop:
                name, state = args.loop.split(":")
                contender = contenders({s.name: s for s in SHAPES}[name], engine, url, args.sample_rate)[state]
                contender.setup()
                serve_untimed(contender.run, args.calls)
                return
            _compare_shapes(args, engine, url, no_reports)
        finally:
            sa._listeners(True)()
            txnsafety.settings.enabled = True
            txnsafety.settings.sample_rate = 1.0
            engine.dispose()
    no_reports()


def _compare_shapes(args: argparse.Namespace, engine: Any, url: str, no_reports: Callable[[], None]) -> None:
    where = "PostgreSQL" if args.postgres else "SQLite"
    for shape in SHAPES:
        if args.only and shape.name not in args.only:
            continue
        result = compare(contenders(shape, engine, url, args.sample_rate), baseline="bare", rounds=args.rounds,
                         per_round=args.per_round, title=f"{shape.name}: {shape.title}, {where}", verify=no_reports)
        print(f"  {shape.name}: checked {100 * result.overhead('checked'):+.1f} %, "
              f"sampled {100 * result.overhead('sampled'):+.1f} %, off {100 * result.overhead('off'):+.1f} %\n",
              flush=True)


if __name__ == "__main__":
    main()
