"""Which part of the SQLAlchemy checker costs the request: the checked request with each part removed in turn.

The SQLAlchemy WSGI request of ``bench_sqlalchemy.py`` (SQLite, 20 reads + 5 writes),
served bare, checked, and checked with one of the integration's parts taken out:

* ``without lookups`` — SQLAlchemy's own one-row accessors and ``_only_one_row`` back (check-then-act notes, TXN105);
* ``without writes``  — no ``before_update`` / ``after_insert`` listener (no write is judged);
* ``without reads``   — ``loading.instances`` unwrapped (no statement's read is noted);
* ``without detach``  — the Session's close leaves its objects as they are;
* ``without all four`` — none of the above: what is left is the middleware's scope and
  the Session's transaction events (``after_begin``, ``after_transaction_end``);
* ``middleware only``  — the middleware's scope around a Session that is not
  instrumented, and no mapper-level listener: the request's floor.

A contender without a part does less than the checker must (it is no configuration
anyone should run): the point is how the cost splits.  If one part carried most of it,
its row would fall to the bare request's; if each row falls by about the same, the cost
is spread over the parts.  Each contender runs in a forked child of its own
(``_compare.py``), with the part removed once, before its rounds.

    python benchmarks/bench_parts.py [--rounds 60] [--processes 6]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sqlalchemy import event  # noqa: E402
from sqlalchemy.orm import Mapper, sessionmaker  # noqa: E402

import txnsafety  # noqa: E402
from benchmarks import bench_sqlalchemy as sa  # noqa: E402
from benchmarks._compare import Contender, add_options, compare, start  # noqa: E402
from txnsafety.sqlalchemy import detached, instrument, lookups, reads  # noqa: E402
from txnsafety.sqlalchemy import events as ts_events  # noqa: E402


def _no_writes() -> None:
    event.remove(Mapper, "before_update", ts_events.BEFORE_UPDATE.listener)
    event.remove(Mapper, "after_insert", ts_events.AFTER_INSERT.listener)


def _none_of_them() -> None:
    for remove in (lookups._uninstall, _no_writes, reads.uninstall, detached.uninstall):
        remove()


#: contender -> what its child removes after installing the checker
PARTS: dict[str, Callable[[], None] | None] = {
    "checked": None,
    "without lookups": lookups._uninstall,
    "without writes": _no_writes,
    "without reads": reads.uninstall,
    "without detach": detached.uninstall,
    "without all four": _none_of_them,
}


def _scope_only() -> None:
    """The checker on (a scope per request), with none of the SQLAlchemy integration's listeners."""
    sa._listeners(False)()
    txnsafety.settings.enabled = True


def _checked_without(remove: Callable[[], None] | None) -> Callable[[], None]:
    def setup() -> None:
        sa._listeners(True)()
        if remove is not None:
            remove()
    return setup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--per-round", type=int, default=3)
    add_options(parser, processes=6)
    args = parser.parse_args()
    if args.in_process:  # a part removed for one contender could not be put back for the next
        parser.error("--in-process: each contender removes a part of the checker for good; run them forked")
    start(args)
    no_reports = sa.watch_reports()
    with tempfile.TemporaryDirectory() as tmp:
        engine = sa.prepared_engine(tmp, None, rows=20)
        checked = sa.make_wsgi_request(instrument(sessionmaker(engine)), True)
        contenders = {"sqlalchemy": Contender(sa.make_wsgi_request(sessionmaker(engine), False), sa._listeners(False))}
        contenders.update((name, Contender(checked, _checked_without(remove))) for name, remove in PARTS.items())
        contenders["middleware only"] = Contender(sa.make_wsgi_request(sessionmaker(engine), True), _scope_only)
        result = compare(contenders, baseline="sqlalchemy", rounds=args.rounds, per_round=args.per_round,
                         title="SQLAlchemy WSGI request (SQLite), checked with each part removed in turn",
                         verify=no_reports)
        for name in (*PARTS, "middleware only"):
            print(result.summary(name))
        engine.dispose()


if __name__ == "__main__":
    main()
