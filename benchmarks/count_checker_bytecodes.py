"""The checker's own Python work per request, in bytecodes executed, by function: exact and in seconds.

Instruction counts (``count_instructions.py``) are exact for one memory layout, but the
SQLAlchemy request's own work moves by up to three points from layout to layout, so a
change worth a few tenths of a point needs several layouts and half an hour to show.
This counts what the checker itself executes instead: every bytecode run in a frame of
``txnsafety/`` (``sys.settrace`` with opcode events, during ``--calls`` requests of one
``bench_shapes.py`` or ``bench_shapes_django.py`` contender after five untimed ones; an
async view's ``sync_to_async`` thread too), per request and per function,
with the calls made.  It is the same from run to run and layout to layout (a sampled
contender draws from a seeded generator), takes seconds, and says which function a
change moved.  What it does not see: the C code those bytecodes call (dict and
attribute look-ups, SQLAlchemy's compiled parts), the work of SQLAlchemy's own event
dispatch for the checker's listeners, and time: a bytecode is not a fixed cost.

    python benchmarks/count_checker_bytecodes.py --shape get              # every request checked
    python benchmarks/count_checker_bytecodes.py --shape get --state sampled --rate 0
    python benchmarks/count_checker_bytecodes.py --shape django-async
    python benchmarks/count_checker_bytecodes.py --shape get --state off --everything  # every frame, and
    python benchmarks/count_checker_bytecodes.py --shape get --state bare --everything  # against bare

With ``--everything`` every Python frame is counted, the application's and the libraries':
against ``--state bare`` that is what the checker adds in all, a library frame it saves included
(a replaced accessor, whose own frame is the checker's, counts its saving only so).
"""
from __future__ import annotations

import argparse
import collections
import os
import random
import sys
import tempfile
import threading
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import txnsafety  # noqa: E402
from benchmarks import bench_shapes  # noqa: E402
from benchmarks import bench_sqlalchemy as sa  # noqa: E402

OURS = os.path.join(os.path.dirname(HERE), "txnsafety") + os.sep
#: ``bench_shapes_django.py``'s shapes (not imported unless asked for: importing it configures Django).
DJANGO_SHAPES = ("django-get", "django-filter-first", "django-list", "django-async")


class Counter:
    """Bytecodes and calls of ``txnsafety/`` frames (``everything``: of every Python frame), keyed
    ``module.py:function``."""

    def __init__(self, everything: bool = False) -> None:
        self.ops: collections.Counter[str] = collections.Counter()
        self.calls: collections.Counter[str] = collections.Counter()
        self.everything = everything

    def trace(self, frame: Any, event: str, arg: Any) -> Any:
        code = frame.f_code
        if not (self.everything or code.co_filename.startswith(OURS)):
            return None
        key = f"{os.path.basename(code.co_filename)}:{code.co_name}"
        self.calls[key] += 1
        frame.f_trace_opcodes = True
        ops = self.ops

        def local(frame: Any, event: str, arg: Any) -> Any:
            if event == "opcode":
                ops[key] += 1
            return local
        return local


def count(shape_name: str, state: str, rate: float, calls: int, postgres: str | None,
          everything: bool = False) -> Counter:
    if shape_name in DJANGO_SHAPES:
        return _count_django(shape_name, state, rate, calls, everything)
    shape = {s.name: s for s in bench_shapes.SHAPES}[shape_name]
    sa.watch_reports()
    with tempfile.TemporaryDirectory() as tmp:
        engine = sa.prepared_engine(tmp, postgres)
        url = engine.url.render_as_string(hide_password=False)
        counter = _count(bench_shapes.contenders(shape, engine, url, rate)[state], calls, everything)
        engine.dispose()
    return counter


def _count_django(shape_name: str, state: str, rate: float, calls: int, everything: bool) -> Counter:
    """A shape of ``bench_shapes_django.py`` (imported here: it configures Django, reading ``--postgres``
    from the command line)."""
    from benchmarks import bench_shapes_django as dj_shapes
    dj_shapes.setup_data()
    return _count(dj_shapes.contenders({s.name: s for s in dj_shapes.SHAPES}[shape_name], rate)[state], calls,
                  everything)


def _count(contender: Any, calls: int, everything: bool) -> Counter:
    contender.setup()
    sampled, txnsafety.settings.sample_rate = txnsafety.settings.sample_rate, 1.0
    for _ in range(5):  # warm, checked: each write site's first judgement reads its source (once)
        contender.run()
    txnsafety.settings.sample_rate = sampled
    random.seed(0)  # the sample's draws (scopes._draw is random.random)
    counter = Counter(everything)
    threading.settrace(counter.trace)  # sync_to_async's thread too (an async view's ORM calls)
    sys.settrace(counter.trace)
    try:
        for _ in range(calls):
            contender.run()
    finally:
        sys.settrace(None)
        threading.settrace(None)  # type: ignore[arg-type]
    return counter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=[s.name for s in bench_shapes.SHAPES] + list(DJANGO_SHAPES), default="get")
    parser.add_argument("--state", choices=["checked", "sampled", "off", "bare"], default="checked",
                        help="off: installed, ENABLED false; bare: txnsafety's listeners removed (for --everything)")
    parser.add_argument("--everything", action="store_true",
                        help="count every Python frame, the application's and the libraries' too: against "
                             "--state bare, what the checker adds in all (a call it saves the library included)")
    parser.add_argument("--rate", type=float, default=bench_shapes.SAMPLE_RATE, help="the sampled state's rate")
    parser.add_argument("--calls", type=int,
                        help="requests counted (default 20; sampled: 200, so that the share checked is near the rate)")
    parser.add_argument("--top", type=int, default=15, help="functions listed (0: the total only)")
    parser.add_argument("--postgres", metavar="URL")
    args = parser.parse_args()
    args.calls = args.calls or (200 if args.state == "sampled" else 20)
    counter = count(args.shape, args.state, args.rate, args.calls, args.postgres, args.everything)
    total, calls = sum(counter.ops.values()) / args.calls, sum(counter.calls.values()) / args.calls
    rate = f" at {args.rate:g}" if args.state == "sampled" else ""
    whose = "Python" if args.everything else "checker"
    print(f"{args.shape} {args.state}{rate}: {total:.0f} {whose} bytecodes per request, {calls:.0f} calls")
    for key, ops in counter.ops.most_common(args.top):
        print(f"  {ops / args.calls:8.0f} {counter.calls[key] / args.calls:7.1f}  {key}")


if __name__ == "__main__":
    main()
