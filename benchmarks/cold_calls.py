"""The same checker code, cold and warm: each write's judgement timed by its place in the request.

The timed benchmarks put the checker at three to six times its share of the request's
instructions (docs/performance.md, sixth round), and ``where_time_goes.py`` finds its
lines slower in the request than warm in a loop.  This shows where from, with no
sampler: it serves one benchmark request many times, checked, and times every call of
the checker's write judgement by its place in the request.

* **SQLAlchemy** (``bench_sqlalchemy.py``): the five writes are judged back to back,
  inside one flush (``updates._judged_quickly``, called by ``before_update``).  The first
  runs after the view's reads and SQLAlchemy's flush preparation, with the checker's code
  and data out of the caches; the next four run the same code right after it.
* **Django** (``bench_django.py``, no other middleware): each ``save()`` is judged
  (``hooks.judge_write``) between the host's statements: every one runs after the host's
  work, none right after another.

If the checker's time were its instructions, every place would cost about the same.
The same code costing several times as much on a cold call as on a warm one is the
footprint the sixth round inferred, seen one call at a time: what the checker costs in a
request is mostly bringing its code and data back into the caches, each time it runs
between the host's work.  A timer's own reading (``perf_counter_ns``, tens of ns) is in
every figure.

    python benchmarks/cold_calls.py [--requests 600] [--skip 100]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass
class Places:
    """Nanoseconds of each call of one hook, by its place (0: first) in its request."""

    times: dict[int, list[int]] = field(default_factory=dict)
    place: int = 0

    def timed(self, hook: Callable[..., Any]) -> Callable[..., Any]:
        """``hook``, timing each call under the place it has in the current request."""
        clock = time.perf_counter_ns

        def timed_hook(*args: Any, **kwargs: Any) -> Any:
            start = clock()
            try:
                return hook(*args, **kwargs)
            finally:
                self.times.setdefault(self.place, []).append(clock() - start)
                self.place += 1
        return timed_hook

    def medians_us(self, skip: int) -> dict[int, float]:
        """The median of each place in microseconds, leaving out the first ``skip`` requests (warm-up)."""
        return {place: statistics.median(calls[skip:]) / 1000
                for place, calls in sorted(self.times.items()) if len(calls) > skip}


def sqlalchemy_writes(requests: int) -> Places:
    """``updates._judged_quickly`` (each of these writes is the common one it judges by itself) by
    place in ``bench_sqlalchemy.py``'s WSGI request (SQLite)."""
    from sqlalchemy.orm import sessionmaker

    from benchmarks import bench_sqlalchemy as sa
    from txnsafety.sqlalchemy import instrument, updates

    places = Places()
    original = updates._judged_quickly
    updates._judged_quickly = places.timed(original)  # before_update looks it up at each call
    try:
        with tempfile.TemporaryDirectory() as tmp:
            engine = sa.prepared_engine(tmp, None, rows=20)
            sa._listeners(True)()
            request = sa.make_wsgi_request(instrument(sessionmaker(engine)), True)
            for _ in range(requests):
                places.place = 0
                request()
            engine.dispose()
    finally:
        updates._judged_quickly = original
    return places


def django_writes(requests: int) -> Places:
    """``hooks.judge_write`` by place in ``bench_django.py``'s request (no other middleware)."""
    from benchmarks import bench_django as dj
    from txnsafety.django import hooks

    places = Places()
    original = hooks.judge_write
    hooks.judge_write = places.timed(original)  # _save_base looks it up at each call
    try:
        dj.setup_data()
        checked = dj.make_contenders(http=True, stack=[])["checked"]
        checked.setup()
        request = checked.run
        for _ in range(requests):
            places.place = 0
            request()
    finally:
        hooks.judge_write = original
    return places


def report(title: str, medians: dict[int, float]) -> str:
    if not medians:
        raise SystemExit(f"cold_calls: no call of {title} was timed: the benchmark request changed")
    first, rest = medians[0], [medians[place] for place in medians if place]
    lines = [title] + [f"  call {place + 1}: {us:6.2f} us" for place, us in medians.items()]
    if rest:
        lines.append(f"  the first call / the median of the others: {first / statistics.median(rest):.1f}x")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--skip", type=int, default=100, help="requests left out as the warm-up")
    args = parser.parse_args()
    if args.requests <= args.skip or args.skip < 0:
        parser.error("--requests must be more than --skip, and --skip at least 0")
    print(report("SQLAlchemy request: each write's judgement (the five run back to back in one flush)",
                 sqlalchemy_writes(args.requests).medians_us(args.skip)))
    print(report("Django request: each save()'s judgement (each after the host's statements)",
                 django_writes(args.requests).medians_us(args.skip)))


if __name__ == "__main__":
    main()
