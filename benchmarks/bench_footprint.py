"""What an instruction costs: the bare SQLAlchemy request, the same plus one tight loop, and checked.

``count_instructions.py`` gives the checker's share of a request in instructions; the
timed benchmarks give it in CPU time, and the second has been about twice the first.
This tells whether that is the harness or the checker's code: a third contender serves
the bare request and then runs a tight Python loop (one small function called
``--pad`` times, a tuple stored in a dict each time: bytecode, a ContextVar and a dict,
as the checker's code has) whose instructions are a known share of the request's.  If
the harness inflated every added instruction, the loop's share in time would be inflated
as much; if the loop costs about its share, the checker's instructions are the dearer
ones (spread over many small functions: more instruction-cache misses and mispredicted
branches per instruction; docs/performance.md, sixth round).

    python benchmarks/bench_footprint.py [--rounds 60] [--processes 4] [--pad 50]
    python benchmarks/count_instructions.py --only footprint   # the loop's share in instructions

``--loop NAME --calls N`` serves one contender untimed (count_instructions.py's mode).
"""
from __future__ import annotations

import argparse
import contextvars
import os
import sys
import tempfile
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sqlalchemy.orm import sessionmaker  # noqa: E402

from benchmarks import bench_sqlalchemy as sa  # noqa: E402
from benchmarks._compare import Contender, add_options, compare, serve_untimed, start  # noqa: E402
from txnsafety.sqlalchemy import instrument  # noqa: E402

_var: contextvars.ContextVar[object] = contextvars.ContextVar("bench_footprint", default=None)
_notes: dict[int, tuple] = {}


def _note(i: int) -> object:
    """One step of the loop: what a checker's note is made of, in one small hot function."""
    _notes[i] = (_var.get(), i, None, False)
    return _notes.get(i - 1)


def padded(request: Callable[[], None], steps: int) -> Callable[[], None]:
    """``request``, then ``steps`` calls of :func:`_note`."""
    def run() -> None:
        request()
        for i in range(steps):
            _note(i)
        _notes.clear()
    return run


CONTENDERS = ("sqlalchemy", "padded", "checked")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--per-round", type=int, default=3)
    parser.add_argument("--pad", type=int, default=50, help="calls of the loop's function per request")
    parser.add_argument("--loop", choices=CONTENDERS, help="serve one contender --calls times, untimed")
    parser.add_argument("--calls", type=int, default=100)
    add_options(parser, processes=4)
    args = parser.parse_args()
    if not args.loop:
        start(args)
    no_reports = sa.watch_reports()
    with tempfile.TemporaryDirectory() as tmp:
        engine = sa.prepared_engine(tmp, None, rows=20)
        bare = sa.make_wsgi_request(sessionmaker(engine), False)
        contenders = {"sqlalchemy": Contender(bare, sa._listeners(False)),
                      "padded": Contender(padded(bare, args.pad), sa._listeners(False)),
                      "checked": Contender(sa.make_wsgi_request(instrument(sessionmaker(engine)), True),
                                           sa._listeners(True))}
        if args.loop:
            contender = contenders[args.loop]
            contender.setup()
            serve_untimed(contender.run, args.calls)
            engine.dispose()
            return
        result = compare(contenders, baseline="sqlalchemy", rounds=args.rounds, per_round=args.per_round,
                         title=f"SQLAlchemy WSGI request (SQLite), bare, plus {args.pad} calls of a tight loop, "
                               "and checked", verify=no_reports)
        for name in ("padded", "checked"):
            print(result.summary(name))
        engine.dispose()


if __name__ == "__main__":
    main()
