"""Runtime checker overhead on a realistic SQLAlchemy request (SQLite, or PostgreSQL with ``--postgres``).

One WSGI request (webob in, JSON out): a new Session, one transaction, 20 reads
(15 ``Session.get`` by primary key, one ``select()`` returning 5 rows) of
policy-declared models, 5 of them modified and flushed at commit, then a JSON
response.  Contenders, run side by side in one process, alternating order round
after round so drift hits both alike:

* ``sqlalchemy``  — txnsafety's SQLAlchemy listeners removed, the bare app, the
  checker off: what the request costs without txnsafety;
* ``checked``     — ``instrument(sessionmaker)``, the app behind
  ``TxnSafetyMiddleware``, the checker on (mode ``log``).

The ratio ``checked / sqlalchemy`` is the overhead (target, DESIGN.md: within 5 %).
A second table times the ORM work alone (no HTTP), the worst case for the ratio.
A third times a read-only list endpoint (one ``select()`` of 200 rows, as JSON):
the checker's cost there is per loaded row, and it is the largest.

    python benchmarks/bench_sqlalchemy.py [--rounds 100] [--per-round 3] [--wall]
    python benchmarks/bench_sqlalchemy.py --loop checked --calls 120   # untimed, for cachegrind
    python benchmarks/bench_sqlalchemy.py --postgres postgresql://USER:PASSWORD@HOST:5432/DB

On PostgreSQL the engine runs REPEATABLE READ (read committed would let the request's
read-modify-writes lose updates: the checker would rightly report them), in a private
database per process (``benchmarks/_pg.py``).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sqlalchemy import Integer, String, create_engine, event, select  # noqa: E402
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker  # noqa: E402
from webob import Request, Response  # noqa: E402

import txnsafety  # noqa: E402
from txnsafety.context import RequestScope, close_scope, open_scope  # noqa: E402
from txnsafety.sqlalchemy import events as ts_events  # noqa: E402
from txnsafety.sqlalchemy import instrument, sqlite_transactions  # noqa: E402
from txnsafety.wsgi import TxnSafetyMiddleware  # noqa: E402
from benchmarks import _pg  # noqa: E402
from benchmarks._compare import Contender, add_options, compare, serve_untimed, start  # noqa: E402


class Base(DeclarativeBase):
    pass


@txnsafety.written_in_transaction()
class Item(Base):
    __tablename__ = "bench_item"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    owner: Mapped[int] = mapped_column(default=0)
    quantity: Mapped[int] = mapped_column(default=0)
    note: Mapped[str] = mapped_column(String(100), default="")


def work(maker: sessionmaker) -> list[dict]:
    """The request's data-layer work: 20 reads, 5 writes, one transaction."""
    with maker() as session, session.begin():
        items = [session.get(Item, key) for key in range(1, 16)]
        items += session.scalars(select(Item).where(Item.id.between(16, 20)).order_by(Item.id)).all()
        for item in items[:5]:
            item.quantity += 1
        return [{"id": i.id, "quantity": i.quantity, "note": i.note} for i in items]


def make_wsgi_request(maker: sessionmaker, checked: bool) -> Callable[[], None]:
    def app(environ, start_response):
        return Response(json={"items": work(maker)})(environ, start_response)
    return _calling(TxnSafetyMiddleware(app) if checked else app)


def _calling(wrapped: Callable) -> Callable[[], None]:
    """One GET through the WSGI application, body read and closed, as a server does."""
    def request() -> None:
        status, _, body = Request.blank("/cart").call_application(wrapped)
        b"".join(body)
        getattr(body, "close", lambda: None)()
        assert status == "200 OK"
    return request


#: Rows of the list endpoint (keys after the 20 of the request above).
LIST_ROWS = 200


def list_work(maker: sessionmaker) -> list[dict]:
    """A list endpoint's data-layer work: one select() of LIST_ROWS rows, read only."""
    with maker() as session, session.begin():
        items = session.scalars(select(Item).where(Item.id > 20).order_by(Item.id)).all()
        return [{"id": i.id, "quantity": i.quantity, "note": i.note} for i in items]


def make_list_request(maker: sessionmaker, checked: bool) -> Callable[[], None]:
    def app(environ, start_response):
        return Response(json={"items": list_work(maker)})(environ, start_response)
    return _calling(TxnSafetyMiddleware(app) if checked else app)


def make_request(maker: sessionmaker, checked: bool) -> Callable[[], None]:
    def request() -> None:
        scope = RequestScope(name="GET /cart") if checked else None
        token = open_scope(scope) if scope else None
        try:
            work(maker)
        finally:
            if scope:
                close_scope(scope, token)
    return request


def _listeners(on: bool) -> Callable[[], None]:
    """A contender's setup: install or remove txnsafety's global mapper listeners."""
    def setup() -> None:
        if on:
            ts_events._install_mapper_events()
        else:
            ts_events._uninstall_mapper_events()
        txnsafety.settings.enabled = on
    return setup


def make_engine(tmp: str, postgres: str | None) -> Any:
    """SQLite in ``tmp`` (WAL, no fsync per commit, as production SQLite setups run), or
    PostgreSQL at REPEATABLE READ in a private database (``--postgres``)."""
    if postgres:
        return create_engine(_pg.sqlalchemy_url(_pg.private_database(postgres)), isolation_level="REPEATABLE READ")
    engine = sqlite_transactions(create_engine(f"sqlite:///{os.path.join(tmp, 'bench.sqlite3')}"))

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection, record):
        dbapi_connection.execute("PRAGMA journal_mode=WAL")
        dbapi_connection.execute("PRAGMA synchronous=NORMAL")
    return engine


def watch_reports() -> Callable[[], None]:
    """Log mode, and a check that no report was made since (run it where the contenders ran:
    a forked child each, by default).  The benchmarks' requests are safe: a report would be
    a false positive, and a checker that reports does more than the figures claim."""
    txnsafety.configure(mode="log")
    seen: list = []
    txnsafety.add_listener(seen.append)

    def no_reports() -> None:
        assert not seen, f"the benchmark request must be safe, got {[str(v) for v in seen]}"
    return no_reports


def prepared_engine(tmp: str, postgres: str | None, rows: int = 20 + LIST_ROWS) -> Any:
    """:func:`make_engine` with the table made and ``rows`` items in it, its connections closed
    before any fork (each contender's child opens its own)."""
    engine = make_engine(tmp, postgres)
    os.register_at_fork(before=engine.dispose)
    Base.metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(Item.__table__.insert(), [{"id": k, "owner": k % 3, "quantity": 0, "note": "x" * 40}
                                               for k in range(1, rows + 1)])
    return engine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--per-round", type=int, default=3)
    parser.add_argument("--loop", choices=["sqlalchemy", "checked"],
                        help="serve the WSGI request --calls times, untimed (instruction counts under valgrind)")
    parser.add_argument("--calls", type=int, default=100)
    add_options(parser, processes=5)
    _pg.add_option(parser)
    args = parser.parse_args()
    if not args.loop:
        start(args)
    no_reports = watch_reports()
    with tempfile.TemporaryDirectory() as tmp:
        engine = prepared_engine(tmp, args.postgres)
        plain = sessionmaker(engine)
        checked = instrument(sessionmaker(engine))
        if args.loop:  # as bench_rows.py --loop: docs/performance.md gives the valgrind commands
            on = args.loop == "checked"
            _listeners(on)()
            request = make_wsgi_request(checked if on else plain, on)
            serve_untimed(request, args.calls)
            _listeners(True)()
            engine.dispose()
            return
        where = "PostgreSQL" if args.postgres else "SQLite"
        try:
            request = compare({"sqlalchemy": Contender(make_wsgi_request(plain, False), _listeners(False)),
                               "checked": Contender(make_wsgi_request(checked, True), _listeners(True))},
                              baseline="sqlalchemy", rounds=args.rounds, per_round=args.per_round,
                              title=f"WSGI request: 20 reads + 5 writes in one {where} transaction (SQLAlchemy ORM)",
                              verify=no_reports)
            print(request.summary("checked") + "\n")
            bare = compare({"sqlalchemy": Contender(make_request(plain, False), _listeners(False)),
                            "checked": Contender(make_request(checked, True), _listeners(True))},
                           baseline="sqlalchemy", rounds=args.rounds, per_round=args.per_round,
                           title="ORM work alone (no HTTP): the worst case for the ratio", verify=no_reports)
            print(bare.summary("checked"))
            print(f"checker cost per read/write: {bare.cost_per('checked', 25) * 1e6:.2f} us\n")
            listing = compare({"sqlalchemy": Contender(make_list_request(plain, False), _listeners(False)),
                               "checked": Contender(make_list_request(checked, True), _listeners(True))},
                              baseline="sqlalchemy", rounds=max(1, args.rounds // 2), per_round=args.per_round,
                              title=f"list endpoint: one select() of {LIST_ROWS} rows, read only (WSGI)",
                              verify=no_reports)
            print(listing.summary("checked"))
            print(f"checker cost per loaded row: {listing.cost_per('checked', LIST_ROWS) * 1e6:.2f} us "
                  f"(the bare request: {listing.medians['sqlalchemy'] / LIST_ROWS * 1e6:.1f} us per row)")
        finally:
            _listeners(True)()
        engine.dispose()
    no_reports()


if __name__ == "__main__":
    main()
