"""Side-by-side timing for noisy 2-core machines.

Runs the contenders in alternating order, round after round, in one process, and
compares medians of per-round times, so drift (CPU frequency, other processes)
hits both sides alike.  Prints one table and the ratio against the baseline.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable


def compare(contenders: dict[str, Callable[[], None]], *, baseline: str, rounds: int = 30,
            per_round: int = 20, title: str = "") -> dict[str, float]:
    """Time ``per_round`` calls of each contender per round; return median seconds per call."""
    names = list(contenders)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for fn in contenders.values():  # warm up: imports, caches, prepared statements
        for _ in range(max(2, per_round // 4)):
            fn()
    for r in range(rounds):
        order = names if r % 2 == 0 else list(reversed(names))
        for name in order:
            fn = contenders[name]
            start = time.perf_counter()
            for _ in range(per_round):
                fn()
            samples[name].append((time.perf_counter() - start) / per_round)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    base = medians[baseline]
    if title:
        print(title)
    print(f"  {'contender':<28}{'median':>12}{'p10':>12}{'p90':>12}{'ratio':>9}")
    for name in names:
        values = sorted(samples[name])
        p10 = values[len(values) // 10]
        p90 = values[(len(values) * 9) // 10]
        print(f"  {name:<28}{_fmt(medians[name]):>12}{_fmt(p10):>12}{_fmt(p90):>12}"
              f"{medians[name] / base:>9.3f}")
    return medians


def _fmt(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"
