"""Runtime checker overhead on a realistic SQLAlchemy request (SQLite).

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

    python benchmarks/bench_sqlalchemy.py [--rounds 30] [--per-round 20]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sqlalchemy import Integer, String, create_engine, event, select  # noqa: E402
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker  # noqa: E402
from webob import Request, Response  # noqa: E402

import txnsafety  # noqa: E402
from txnsafety.context import RequestScope, close_scope, open_scope  # noqa: E402
from txnsafety.sqlalchemy import events as ts_events  # noqa: E402
from txnsafety.sqlalchemy import instrument, sqlite_transactions  # noqa: E402
from txnsafety.wsgi import TxnSafetyMiddleware  # noqa: E402


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
        items += session.scalars(select(Item).where(Item.id > 15).order_by(Item.id)).all()
        for item in items[:5]:
            item.quantity += 1
        return [{"id": i.id, "quantity": i.quantity, "note": i.note} for i in items]


def make_wsgi_request(maker: sessionmaker, checked: bool) -> Callable[[], None]:
    def app(environ, start_response):
        return Response(json={"items": work(maker)})(environ, start_response)
    wrapped = TxnSafetyMiddleware(app) if checked else app

    def request() -> None:
        status, _, body = Request.blank("/cart").call_application(wrapped)
        b"".join(body)
        getattr(body, "close", lambda: None)()
        assert status == "200 OK"
    return request


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


def _set_listeners(on: bool) -> None:
    """Install or remove txnsafety's global mapper listeners (not timed)."""
    if on:
        ts_events._install_mapper_events()
    else:
        ts_events._uninstall_mapper_events()
    txnsafety.settings.enabled = on


def compare(contenders: dict[str, tuple[Callable[[], None], bool]], *, rounds: int, per_round: int,
            title: str) -> dict[str, float]:
    """Alternating rounds; each contender's listeners are set before its (timed) calls.

    Prints medians and p10 of the per-round times, and the median of the per-round
    ratios (each round times both contenders back to back, so a slow spell of a
    shared machine hits both): the figure to read on a noisy machine.
    """
    names = list(contenders)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for fn, on in contenders.values():
        _set_listeners(on)
        for _ in range(max(2, per_round // 4)):
            fn()
    for r in range(rounds):
        for name in (names if r % 2 == 0 else list(reversed(names))):
            fn, on = contenders[name]
            _set_listeners(on)
            start = time.perf_counter()
            for _ in range(per_round):
                fn()
            samples[name].append((time.perf_counter() - start) / per_round)
    _set_listeners(True)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    base = names[0]
    print(title)
    print(f"  {'contender':<14}{'median':>12}{'p10':>12}{'p90':>12}{'ratio':>9}")
    for name in names:
        values = sorted(samples[name])
        print(f"  {name:<14}{medians[name] * 1e3:>9.3f} ms{values[len(values) // 10] * 1e3:>9.3f} ms"
              f"{values[(len(values) * 9) // 10] * 1e3:>9.3f} ms{medians[name] / medians[base]:>9.3f}")
    for name in names[1:]:
        ratios = [a / b for a, b in zip(samples[name], samples[base])]
        medians[f"{name}/{base}"] = statistics.median(ratios)
        medians[f"{name}/{base} best"] = min(samples[name]) / min(samples[base])
        print(f"  median of per-round ratios {name}/{base}: {statistics.median(ratios):.3f}; "
              f"ratio of the best rounds: {min(samples[name]) / min(samples[base]):.3f}")
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--per-round", type=int, default=5)
    args = parser.parse_args()
    txnsafety.configure(mode="log")
    seen: list = []
    txnsafety.add_listener(seen.append)
    with tempfile.TemporaryDirectory() as tmp:
        engine = sqlite_transactions(create_engine(f"sqlite:///{os.path.join(tmp, 'bench.sqlite3')}"))

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_connection, record):  # as production SQLite setups do: WAL, no fsync per commit
            dbapi_connection.execute("PRAGMA journal_mode=WAL")
            dbapi_connection.execute("PRAGMA synchronous=NORMAL")
        Base.metadata.create_all(engine)
        with engine.begin() as conn:
            conn.execute(Item.__table__.insert(), [{"id": k, "owner": k % 3, "quantity": 0, "note": "x" * 40}
                                                   for k in range(1, 21)])
        plain = sessionmaker(engine)
        checked = instrument(sessionmaker(engine))
        medians = compare({"sqlalchemy": (make_wsgi_request(plain, False), False),
                           "checked": (make_wsgi_request(checked, True), True)},
                          rounds=args.rounds, per_round=args.per_round,
                          title="WSGI request: 20 reads + 5 writes in one SQLite transaction (SQLAlchemy ORM)")
        ratio = medians["checked/sqlalchemy"]
        print(f"checker overhead per request: {100 * (ratio - 1):+.1f} %  (target: within +5 %)\n")
        bare = compare({"sqlalchemy": (make_request(plain, False), False),
                        "checked": (make_request(checked, True), True)},
                       rounds=args.rounds, per_round=args.per_round,
                       title="ORM work alone (no HTTP): the worst case for the ratio")
        print(f"checker overhead, ORM alone: {100 * (bare['checked/sqlalchemy'] - 1):+.1f} %; "
              f"per read/write: {(bare['checked'] - bare['sqlalchemy']) / 25 * 1e6:.2f} us")
        engine.dispose()
    assert not seen, f"the benchmark request must be safe, got {[str(v) for v in seen]}"


if __name__ == "__main__":
    main()
