"""Side-by-side timing for noisy 2-core machines.

Every round runs each contender once, in rotating order, ``per_round`` calls
each, so drift (CPU frequency, the machine's other tenants) hits all of them
alike; each round gives one ratio per contender against the baseline, and the
figure to read is the median of those ratios, with its 95 % confidence interval.

Three choices make the figure steady enough to compare against a 5 % target on a
shared machine:

* the clock is this thread's CPU time (``time.thread_time``), not wall time: a
  request that waits for a core is not slower code, and the checker does no I/O
  of its own (``--wall`` switches to ``time.perf_counter``);
* a contender may have a ``setup`` (switch hooks on or off), run before its turn
  and followed by one untimed call, so the timed calls see the process as it is
  in production, where the hooks stay put;
* the youngest generation of garbage is collected before each turn, so the
  collections a contender's allocations trigger fall on its own time.

Rounds that follow each other drift together, and a process has offsets of its own
(hash seeds, memory layout, which contender's objects landed where): one process's
interval says how precise that run is, not how far apart two runs may land.  Runs of
the same code in separate processes differed by up to 5 points on the 2-core machine
while each claimed +-1.5.  Hence ``--processes N`` (pyperf's remedy): the benchmark
runs N times in fresh worker processes, one after the other, and the figure is the
median of their N medians, printed with their range; the per-process figures are
printed too.

**Each contender in a forked child, hooks never switched (the default).**  Switching a
library's hooks in and out of one process between turns is no state production is ever
in: a switch rebinds module globals and class attributes, whose cost may outlast the
one untimed call after it, and state the hooks leave behind (a listener the checker put
on a shared engine) is then paid by the baseline too, which hid about five points of the
checker's cost on the PostgreSQL SQLAlchemy request (docs/performance.md, "Fifth
round").  So each contender gets a child forked from the benchmark process once
its data is set up (same hash seed, same memory layout up to the fork); the child runs
the contender's ``setup`` once, warms up, and then times one turn each time the parent
asks, in the same rotating rounds, one child at a time.  ``--in-process`` times all
contenders in this process, switching them per turn, as before.  A benchmark that
holds database connections closes them before a fork (``os.register_at_fork``): a
connection is never shared by two processes.
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Union


@dataclass
class Contender:
    """One way of serving the request: ``run`` it; ``setup`` (untimed) before its turn (forked: once);
    ``verify`` once its rounds are done, where it ran (an exception fails the benchmark)."""

    run: Callable[[], None]
    setup: Callable[[], None] | None = None
    verify: Callable[[], None] | None = None


@dataclass
class Comparison:
    """What :func:`compare` measured: seconds per call, and ratios against the baseline."""

    baseline: str
    medians: dict[str, float]
    samples: dict[str, list[float]] = field(repr=False)
    ratios: dict[str, tuple[float, float, float]]  # name -> (median, CI low, CI high)
    #: Worker processes pooled (1: this process alone; the interval is then a 95 % CI,
    #: else the range of the per-process medians).
    processes: int = 1
    per_process: dict[str, list[float]] = field(default_factory=dict, repr=False)
    title: str = ""
    #: Each contender in a forked child of its own (else all in one process).
    forked: bool = True

    def overhead(self, name: str) -> float:
        """The median per-round ratio of ``name`` to the baseline, minus one."""
        return self.ratios[name][0] - 1

    def cost_per(self, name: str, operations: int) -> float:
        """Seconds ``name`` adds per operation (difference of medians)."""
        return (self.medians[name] - self.medians[self.baseline]) / operations

    def summary(self, name: str, target: float = 0.05) -> str:
        mid, low, high = self.ratios[name]
        verdict = "within" if mid - 1 <= target else "over"
        return (f"overhead of {name}: {100 * (mid - 1):+.1f} % ({self.interval_label()} {100 * (low - 1):+.1f} to "
                f"{100 * (high - 1):+.1f} %), {verdict} the {100 * target:.0f} % target")

    def interval_label(self) -> str:
        return "95 % CI" if self.processes == 1 else f"median of {self.processes} processes, range"


Entry = Union[Callable[[], None], Contender]

_clock: Callable[[], float] = time.thread_time


#: This process's part: None (time the contenders here), or the parent's pooled
#: comparisons still to hand out, in the order the benchmark asks for them.
_pooled: list[Comparison] | None = None
#: A worker's file for its raw samples (the parent reads it), or None.
_worker_out: str | None = None
#: Time each contender in a forked child of its own (see the module docstring), or all here.
_forked = True
#: Pin the forked children to one core (see _one_core).
_pin = True
#: Time the baseline twice, as two contenders (``--null-control``; see :func:`with_null_control`).
_null_control = False


#: A file for :func:`serve_untimed` to write its count of calls to, once all are served.
SERVED_ENV = "TXNSAFETY_BENCH_SERVED"


def serve_untimed(run: Callable[[], None], calls: int) -> None:
    """A benchmark's ``--loop NAME --calls N`` mode: five calls to warm the caches, then ``calls``.

    Untimed: it is what ``count_instructions.py`` runs under valgrind and
    ``where_time_goes.py`` under py-spy, which counts only the samples taken inside
    this function and outside :func:`_warm_up` (their names are how it finds them).
    """
    _warm_up(run)
    for _ in range(calls):
        run()
    served = os.environ.get(SERVED_ENV)
    if served:  # where_time_goes.py: py-spy's exit status does not say whether this got here
        with open(served, "w") as f:
            f.write(str(calls))


def _warm_up(run: Callable[[], None]) -> None:
    for _ in range(5):  # imports, statement caches, the source files provenance.py reads once
        run()


def add_options(parser: argparse.ArgumentParser, *, processes: int = 1) -> None:
    """``--wall`` (wall clock instead of this thread's CPU time) and ``--processes N``."""
    parser.add_argument("--wall", action="store_true", help="time wall clock instead of CPU time")
    parser.add_argument("--processes", type=int, default=processes, metavar="N",
                        help=f"run in N fresh processes, one after the other, and pool them (default {processes})")
    parser.add_argument("--in-process", action="store_true",
                        help="time every contender in this process, switching hooks per turn (default: a forked "
                             "child per contender, hooks never switched)")
    parser.add_argument("--any-core", action="store_true",
                        help="let the scheduler place the forked children (default: all on one core)")
    parser.add_argument("--null-control", action="store_true",
                        help="time the baseline a second time, as a contender of its own: the spread of a "
                             "difference that is not there")
    parser.add_argument("--worker-out", help=argparse.SUPPRESS)


def start(args: argparse.Namespace) -> None:
    """Apply the options; with ``--processes N`` > 1, run the N workers now.

    The benchmark's own code then runs on unchanged: each :func:`compare` it calls
    returns (and prints) the pooled figures of the workers' matching comparison
    instead of timing anything in this process.
    """
    global _clock, _pooled, _worker_out, _forked, _pin, _null_control
    _clock = time.perf_counter if args.wall else time.thread_time
    _null_control = args.null_control
    _worker_out = args.worker_out
    _forked = not args.in_process
    _pin = not args.any_core
    if args.processes < 1:
        raise SystemExit("--processes must be at least 1")
    if _worker_out is None:
        where = "all contenders in one process, switched per turn" if args.in_process else "a forked child each"
        print(f"clock: {'wall (perf_counter)' if args.wall else 'CPU time of this thread'}; {where}")
    if args.processes > 1 and _worker_out is None:
        _pooled = _run_workers(args.processes)


def _run_workers(count: int) -> list[Comparison]:
    """Run this benchmark ``count`` times as ``--processes 1`` workers; pool what they timed."""
    runs: list[list[dict]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for number in range(1, count + 1):
            out = os.path.join(tmp, f"worker{number}.json")
            # the same command line; argparse keeps an option's last value
            command = [sys.executable, sys.argv[0], *sys.argv[1:], "--processes", "1", "--worker-out", out]
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                sys.stderr.write(done.stdout + done.stderr)
                raise SystemExit(f"worker process {number} failed (exit {done.returncode})")
            with open(out) as f:
                runs.append([json.loads(line) for line in f])
            figures = "; ".join(f"{r['title'].split(':')[0] or 'comparison'}: " + ", ".join(
                f"{name} {100 * (_median_ratio(r, name) - 1):+.1f} %" for name in r["names"] if name != r["baseline"])
                for r in runs[-1])
            print(f"process {number}/{count}: {figures}", flush=True)
    print()
    if len({len(run) for run in runs}) != 1:
        raise SystemExit("the worker processes ran different comparisons")
    return [_pool([run[i] for run in runs]) for i in range(len(runs[0]))]


def _median_ratio(record: dict, name: str) -> float:
    return statistics.median(a / b for a, b in zip(record["samples"][name], record["samples"][record["baseline"]]))


def _pool(records: list[dict]) -> Comparison:
    """One comparison from the same comparison run in several processes.

    The figure for a contender is the median of the per-process median ratios, its
    interval their range; the medians of seconds are over all samples.
    """
    first = records[0]
    names, baseline = first["names"], first["baseline"]
    samples = {name: [value for r in records for value in r["samples"][name]] for name in names}
    per_process = {name: [_median_ratio(r, name) for r in records] for name in names}
    ratios = {name: (statistics.median(values), min(values), max(values)) for name, values in per_process.items()}
    return Comparison(baseline, {name: statistics.median(v) for name, v in samples.items()}, samples, ratios,
                      processes=len(records), per_process=per_process, title=first["title"],
                      forked=first.get("forked", True))


def compare(contenders: dict[str, Entry], *, baseline: str, rounds: int = 200, per_round: int = 5,
            title: str = "", verify: Callable[[], None] | None = None, fork: bool | None = None,
            threads: bool = False) -> Comparison:
    """Time ``per_round`` calls of each contender per round; print a table; return the figures.

    ``verify`` runs where the contenders ran (in each forked child, or here) once the
    rounds are done, after each contender's own: an exception it raises (say, a report the
    checker should not have made) fails the benchmark.  ``fork``: a forked child per
    contender (True), all here (False), or as the command line says (None).  ``threads``:
    the request's work runs in other threads too (an async view's ``sync_to_async``), so
    the CPU clock is the process's (``time.process_time``), not this thread's.
    """
    global _clock
    if threads and _clock is time.thread_time:
        _clock = time.process_time
    try:
        return _compare(contenders, baseline, rounds, per_round, title, verify, fork)
    finally:
        if threads and _clock is time.process_time:
            _clock = time.thread_time


def _compare(contenders: dict[str, Entry], baseline: str, rounds: int, per_round: int, title: str,
             verify: Callable[[], None] | None, fork: bool | None) -> Comparison:
    if _null_control:
        contenders = with_null_control(contenders, baseline)
    names = list(contenders)
    if _pooled is not None:  # the parent of worker processes: hand out their pooled figures
        result = _pooled.pop(0)
        if list(result.medians) != names or result.title != title:
            raise SystemExit(f"the workers' comparison {result.title!r} is not {title!r}")
        _print(result, names, title)
        return result
    entries = {name: entry if isinstance(entry, Contender) else Contender(entry)
               for name, entry in contenders.items()}
    forked = _forked if fork is None else fork
    timing = _rounds_forked if forked and hasattr(os, "fork") else _rounds_in_process
    samples = timing(entries, rounds, per_round, verify)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    ratios = {name: _median_with_ci([a / b for a, b in zip(samples[name], samples[baseline])])
              for name in names}
    result = Comparison(baseline, medians, samples, ratios, title=title, forked=timing is _rounds_forked)
    if _worker_out is not None:
        with open(_worker_out, "a") as f:
            f.write(json.dumps({"title": title, "baseline": baseline, "names": names, "samples": samples,
                                "forked": result.forked}) + "\n")
    _print(result, names, title)
    return result


def null_control_name(baseline: str) -> str:
    return f"{baseline}, again"


def with_null_control(contenders: dict[str, Entry], baseline: str) -> dict[str, Entry]:
    """The contenders and the baseline once more, last: an A/A test.

    Forked, the copy gets a child of its own, so its ratio to the baseline is what two
    children serving the same code differ by (memory layout, where each one's objects
    landed, the machine's drift): a contender's difference inside that spread is not
    shown to be there.  In one process (``--in-process``, or a ``compare(fork=False)``)
    the copy is the same callable, and its ratio shows only the rounds' noise.  Measured
    so: the SQLAlchemy request's copy came out at +0.0 % (per-process range -2.4 to
    +1.8 %, 12 processes) beside the checker's +5.5 %.
    """
    return {**contenders, null_control_name(baseline): contenders[baseline]}


def _timed_turn(run: Callable[[], None], per_round: int) -> float:
    """Seconds per call of ``per_round`` calls; the young garbage of the turn before is collected first,
    so the collections a contender's allocations trigger fall on its own time."""
    clock = _clock
    gc.collect(0)
    start = clock()
    for _ in range(per_round):
        run()
    return (clock() - start) / per_round


def _rounds_in_process(entries: dict[str, Contender], rounds: int, per_round: int,
                       verify: Callable[[], None] | None) -> dict[str, list[float]]:
    """Every contender here, its ``setup`` (switching hooks) before each of its turns."""
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
            samples[name].append(_timed_turn(entry.run, per_round))
    for entry in entries.values():
        _verify(entry, verify)
    return samples


def _verify(entry: Contender, verify: Callable[[], None] | None) -> None:
    for check in (entry.verify, verify):
        if check is not None:
            check()


def _rounds_forked(entries: dict[str, Contender], rounds: int, per_round: int,
                   verify: Callable[[], None] | None) -> dict[str, list[float]]:
    """A forked child per contender, its ``setup`` run once; the parent hands out the turns."""
    names = list(entries)
    samples: dict[str, list[float]] = {name: [] for name in names}
    children: dict[str, _Child] = {}
    allowed = _one_core()
    first = os.getpid() % len(names)  # which contender is forked first varies from process to process
    try:
        for name in names[first:] + names[:first]:
            children[name] = _Child.fork(entries[name], per_round, verify, list(children.values()))
        for child in children.values():
            child.ask("ready")
        for r in range(rounds):
            shift = r % len(names)
            for name in names[shift:] + names[:shift]:
                samples[name].append(float(children[name].ask("time")))
        for child in children.values():
            child.ask("end")
    finally:
        for child in children.values():
            child.close()
        if allowed is not None:
            os.sched_setaffinity(0, allowed)
    return samples


def _one_core() -> set[int] | None:
    """Pin this process, and so the children it forks next, to one of its cores; the cores it had.

    Left to the scheduler, two children could run on different cores for long stretches,
    and on a shared machine one core is not as fast as the other (a neighbour on its
    sibling thread, its caches): the turns of one contender would be timed on another
    core than the other's.  The core is this process's id modulo the cores it may use,
    so the pooled worker processes spread over them.
    """
    if not hasattr(os, "sched_setaffinity") or not _pin:
        return None
    allowed = os.sched_getaffinity(0)
    cores = sorted(allowed)
    os.sched_setaffinity(0, {cores[os.getpid() % len(cores)]})
    return allowed


@dataclass
class _Child:
    """One forked contender: it answers each line the parent sends with one line."""

    pid: int
    commands: Any
    answers: Any

    @classmethod
    def fork(cls, entry: Contender, per_round: int, verify: Callable[[], None] | None,
             siblings: list["_Child"]) -> "_Child":
        to_child, from_parent = os.pipe()[::-1]
        from_child, to_parent = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the benchmark (its cleanups are the parent's)
            os.close(to_child)
            os.close(from_child)
            for sibling in siblings:  # else an earlier child would never see its parent hang up
                os.close(sibling.commands.fileno())
                os.close(sibling.answers.fileno())
            code = 1
            try:
                code = _serve(entry, per_round, verify, os.fdopen(from_parent, "r"), os.fdopen(to_parent, "w", 1))
            finally:
                os._exit(code)
        os.close(from_parent)
        os.close(to_parent)
        return cls(pid, os.fdopen(to_child, "w", 1), os.fdopen(from_child, "r"))

    def ask(self, command: str) -> str:
        """Send ``command``; the child's answer, or SystemExit with the child's traceback."""
        self.commands.write(command + "\n")
        answer = self.answers.readline()
        if not answer:
            raise SystemExit(f"a contender's child process ended without answering {command!r}")
        if answer.startswith("error "):
            raise SystemExit("a contender's child process failed:\n" + json.loads(answer[6:]))
        return answer.strip()

    def close(self) -> None:
        for stream in (self.commands, self.answers):
            try:
                stream.close()
            except OSError:
                pass
        os.waitpid(self.pid, 0)


def _serve(entry: Contender, per_round: int, verify: Callable[[], None] | None, commands: Any, answers: Any) -> int:
    """The child's loop: set the contender up and warm it when asked ``ready``, then time a turn per
    ``time`` asked; ``end`` verifies."""
    try:
        for command in commands:
            command = command.strip()
            if command == "ready":  # one child at a time, as the turns: they share the database
                if entry.setup:
                    entry.setup()
                for _ in range(max(3, per_round) + 1):  # warm up: imports, caches, prepared statements
                    entry.run()
                answers.write("ready\n")
            elif command == "time":
                answers.write(f"{_timed_turn(entry.run, per_round)!r}\n")
            elif command == "end":
                _verify(entry, verify)
                answers.write("done\n")
                return 0
        return 1  # the parent went away
    except (Exception, SystemExit):  # a failed check (SystemExit) too: sent to the parent
        try:
            answers.write("error " + json.dumps(traceback.format_exc()) + "\n")
        except OSError:
            pass
        return 1


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
    print(f"  {'contender':<20}{'median':>12}{'p10':>12}{'p90':>12}{'ratio':>9}   {result.interval_label()}")
    for name in names:
        values = sorted(result.samples[name])
        mid, low, high = result.ratios[name]
        print(f"  {name:<20}{_fmt(result.medians[name]):>12}{_fmt(values[len(values) // 10]):>12}"
              f"{_fmt(values[(len(values) * 9) // 10]):>12}{mid:>9.3f}   {low:.3f}-{high:.3f}")
    control = null_control_name(result.baseline)
    if control in result.ratios:
        mid, low, high = result.ratios[control]
        how = "the baseline in a child of its own" if result.forked else "the same callable, in this process"
        print(f"null control ({control!r}: {how}): {100 * (mid - 1):+.1f} % "
              f"({result.interval_label()} {100 * (low - 1):+.1f} to {100 * (high - 1):+.1f} %)")


def _fmt(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"
