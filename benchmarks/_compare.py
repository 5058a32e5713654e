"""Side-by-side timing for noisy 2-core machines.

Every round runs each contender once, in rotating order, ``per_round`` calls
each, so drift (CPU frequency, the machine's other tenants) hits all of them
alike; each round gives one ratio per contender against the baseline, and the
figure to read is the median of those ratios, with its 95 % confidence interval.

Two choices make the figure steady enough to compare against a 5 % target on a
shared machine:

* the clock is this thread's CPU time (``time.thread_time``), not wall time: a
  request that waits for a core is not slower code, and the checker does no I/O
  of its own (``--wall`` switches to ``time.perf_counter``);
* a contender may have a ``setup`` (switch hooks on or off), run before its turn
  and followed by one untimed call, so the timed calls see the process as it is
  in production, where the hooks stay put;
* the youngest generation of garbage is collected before each turn, so the
  collections a contender's allocations trigger fall on its own time.

Rounds that follow each other drift together, so the interval is somewhat optimistic;
it says how precise one run is, not how far apart two runs may land.
"""
from __future__ import annotations

import argparse
import gc
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Union


@dataclass
class Contender:
    """One way of serving the request: ``run`` it; ``setup`` (untimed) before its turn."""

    run: Callable[[], None]
    setup: Callable[[], None] | None = None


@dataclass
class Comparison:
    """What :func:`compare` measured: seconds per call, and ratios against the baseline."""

    baseline: str
    medians: dict[str, float]
    samples: dict[str, list[float]] = field(repr=False)
    ratios: dict[str, tuple[float, float, float]]  # name -> (median, CI low, CI high)

    def overhead(self, name: str) -> float:
        """The median per-round ratio of ``name`` to the baseline, minus one."""
        return self.ratios[name][0] - 1

    def cost_per(self, name: str, operations: int) -> float:
        """Seconds ``name`` adds per operation (difference of medians)."""
        return (self.medians[name] - self.medians[self.baseline]) / operations

    def summary(self, name: str, target: float = 0.05) -> str:
        mid, low, high = self.ratios[name]
        verdict = "within" if mid - 1 <= target else "over"
        return (f"overhead of {name}: {100 * (mid - 1):+.1f} % (95 % CI {100 * (low - 1):+.1f} to "
                f"{100 * (high - 1):+.1f} %), {verdict} the {100 * target:.0f} % target")


Entry = Union[Callable[[], None], Contender]

_clock: Callable[[], float] = time.thread_time


def add_clock_option(parser: argparse.ArgumentParser) -> None:
    """``--wall``: time with the wall clock instead of this thread's CPU time."""
    parser.add_argument("--wall", action="store_true", help="time wall clock instead of CPU time")


def use_clock(args: argparse.Namespace) -> None:
    global _clock
    _clock = time.perf_counter if getattr(args, "wall", False) else time.thread_time
    print(f"clock: {'wall (perf_counter)' if _clock is time.perf_counter else 'CPU time of this thread'}")


def compare(contenders: dict[str, Entry], *, baseline: str, rounds: int = 200, per_round: int = 5,
            title: str = "") -> Comparison:
    """Time ``per_round`` calls of each contender per round; print a table; return the figures."""
    entries = {name: entry if isinstance(entry, Contender) else Contender(entry)
               for name, entry in contenders.items()}
    names = list(entries)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for entry in entries.values():  # warm up: imports, caches, prepared statements
        if entry.setup:
            entry.setup()
        for _ in range(max(3, per_round)):
            entry.run()
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            entry = entries[name]
            if entry.setup:
                entry.setup()
                entry.run()  # untimed: the first call after a switch
            run, clock = entry.run, _clock
            gc.collect(0)  # the young garbage of the contender before is not collected on this one's time
            start = clock()
            for _ in range(per_round):
                run()
            samples[name].append((clock() - start) / per_round)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    ratios = {name: _median_with_ci([a / b for a, b in zip(samples[name], samples[baseline])])
              for name in names}
    result = Comparison(baseline, medians, samples, ratios)
    _print(result, names, title)
    return result


def _median_with_ci(values: list[float]) -> tuple[float, float, float]:
    """The median and a distribution-free 95 % confidence interval for it (order statistics)."""
    ordered = sorted(values)
    n = len(ordered)
    half_width = 1.96 * math.sqrt(n) / 2
    low = max(0, math.floor(n / 2 - half_width))
    high = min(n - 1, math.ceil(n / 2 + half_width))
    return statistics.median(ordered), ordered[low], ordered[high]


def _print(result: Comparison, names: list[str], title: str) -> None:
    if title:
        print(title)
    print(f"  {'contender':<20}{'median':>12}{'p10':>12}{'p90':>12}{'ratio':>9}   95 % CI")
    for name in names:
        values = sorted(result.samples[name])
        mid, low, high = result.ratios[name]
        print(f"  {name:<20}{_fmt(result.medians[name]):>12}{_fmt(values[len(values) // 10]):>12}"
              f"{_fmt(values[(len(values) * 9) // 10]):>12}{mid:>9.3f}   {low:.3f}-{high:.3f}")


def _fmt(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"
