"""Where the checker's time goes inside a request: py-spy samples, attributed line by line.

``count_instructions.py`` counts the checker's instructions and the timed benchmarks its
CPU time; the second has been two to five times the first (docs/performance.md, sixth
round), and neither says on which of the checker's lines the time is spent *inside the
request*, where the host's work has the caches.  This runs one benchmark case's checked
contender (``count_instructions.py``'s cases, their ``--loop`` mode) under py-spy,
which stops the process for each sample (blocking: no torn stacks), and sorts every
sample taken inside ``_compare.serve_untimed`` into:

* **the checker's own** — the deepest txnsafety frame has no host frame below it: the
  checker's bytecode, or a builtin or standard-library call it made;
* **the host's, through a checker wrapper** — the same, but that frame's line calls the
  host's original (a name starting ``_original``): where the original is compiled (Cython,
  as SQLAlchemy 2.1's ``Result._only_one_row``) its own work has no Python frame and lands
  on the wrapper's line.  Shown apart, never counted as the checker's;
* **the host's** — everything else.

The checker's share is approximate, with errors both ways.  Two things count as the
checker's that the bare request pays as well: a txnsafety helper
the bare contender runs too (``sqlite_transactions``' ``BEGIN`` listener in the SQLAlchemy
benchmarks), and freeing the host's objects the checker held until its line let them go
(``reads.root_ended`` drops the last statement's ``QueryContext``: 10 of its 15 µs a
request are that object's deallocation, which the bare request does when the statement
ends; ``RequestScope.close`` clears stamps that hold the request's ORM objects).  The
other way, a host function the checker calls (``instance.pk``, ``InstanceState.session``,
``QuerySet.db``) counts as the host's: about 0.1 to 0.3 % of a request, by a reviewer's
count.  Code made by ``exec`` (``<string>`` frames, such as dataclass ``__init__``s) counts
as nobody's in particular: the checker's when the checker called it.

The checker's share is then comparable with the timed overhead (``bench_sqlalchemy.py``,
``bench_django.py``): about equal means the time is the checker's own lines, slower in
the request than warm in a loop; much less would mean the checker slows the host's code.
Per-request microseconds are the share of the sampled time, which py-spy's pauses
inflate somewhat; read them as proportions.

    python benchmarks/where_time_goes.py [--case sqlalchemy-request] [--calls 3000] [--rate 400] [--top 25]

Needs py-spy (``pip install py-spy``; it is in the ``test`` extra) and permission to
ptrace the child (root, or ``kernel.yama.ptrace_scope`` 0).
"""
from __future__ import annotations

import argparse
import collections
import linecache
import math
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass, field
from enum import Enum

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from benchmarks._compare import SERVED_ENV  # noqa: E402
from benchmarks.count_instructions import CASES  # noqa: E402

PACKAGE = os.path.join(os.path.dirname(HERE), "txnsafety") + os.sep
#: The standard library: a call the checker makes into it is the checker's time.
STDLIB = os.path.realpath(sysconfig.get_paths()["stdlib"]) + os.sep
#: Where installed packages live (inside STDLIB on some layouts): the host's.
PACKAGES = tuple({os.path.realpath(sysconfig.get_paths()[key]) + os.sep for key in ("purelib", "platlib")})
#: The frame every counted sample passes through, and the one of the warm-up calls (benchmarks/_compare.py).
LOOP, WARM_UP = "serve_untimed", "_warm_up"


class Owner(Enum):
    CHECKER = "the checker's own"
    THROUGH_WRAPPER = "the host's, through a checker wrapper"
    HOST = "the host's"


@dataclass(frozen=True)
class Frame:
    function: str
    path: str
    line: int

    @property
    def checker(self) -> bool:
        return self.path.startswith(PACKAGE)

    @property
    def host(self) -> bool:
        """Application, framework or benchmark code: anything neither the checker's nor the standard library's."""
        if self.checker or self.path.startswith("<"):
            return False
        real = os.path.realpath(self.path)
        return not real.startswith(STDLIB) or real.startswith(PACKAGES) or "site-packages" in real

    def where(self) -> str:
        return f"{os.path.relpath(self.path, os.path.dirname(PACKAGE))}:{self.line} {self.function}"


@dataclass
class Attribution:
    """Samples inside the loop: each owner's count, and the checker's by line and by module."""

    total: int = 0
    by_owner: collections.Counter = field(default_factory=collections.Counter)
    by_line: collections.Counter = field(default_factory=collections.Counter)
    by_module: collections.Counter = field(default_factory=collections.Counter)
    wrapped: collections.Counter = field(default_factory=collections.Counter)

    def share(self, owner: Owner) -> float:
        return self.by_owner[owner] / self.total if self.total else 0.0


def parse_frame(text: str) -> Frame | None:
    """``function (path:line)``, as py-spy's raw format writes a frame (``--full-filenames``).

    Split at the first `` (``: a function's name never holds one (``f.<locals>.<lambda>``),
    a path may (``/tmp/a (1)/x.py``).  A frame without a line keeps line 0.  (A path with
    ``;`` cannot be read back from this format: py-spy does not escape it.)
    """
    head, sep, tail = text.partition(" (")
    if not sep or not tail.endswith(")"):
        return None
    path, colon, line = tail[:-1].rpartition(":")
    if not colon or not line.isdigit():
        return Frame(head, tail[:-1], 0)
    return Frame(head, path, int(line))


def owner_of(stack: list[Frame]) -> tuple[Owner, Frame | None]:
    """Who a sample's time belongs to, and the checker frame it is charged to."""
    deepest = max((i for i, frame in enumerate(stack) if frame.checker), default=None)
    if deepest is None or any(frame.host for frame in stack[deepest + 1:]):
        return Owner.HOST, None
    frame = stack[deepest]
    if "_original" in linecache.getline(frame.path, frame.line):
        return Owner.THROUGH_WRAPPER, frame
    return Owner.CHECKER, frame


def attribute(raw_lines: list[str]) -> Attribution:
    """Sort py-spy's raw samples (``frame;frame;... count``, root first) taken inside :data:`LOOP`."""
    result = Attribution()
    for text in raw_lines:
        stack_text, _, count_text = text.rstrip("\n").rpartition(" ")
        if not count_text.isdigit():
            continue
        frames = [parse_frame(part) for part in stack_text.split(";")]
        stack = [frame for frame in frames if frame is not None]
        inside = next((i for i, frame in enumerate(stack) if frame.function == LOOP), None)
        if inside is None or (inside + 1 < len(stack) and stack[inside + 1].function == WARM_UP):
            continue  # start-up, data set-up, the warm-up calls, interpreter exit
        count = int(count_text)
        result.total += count
        owner, charged = owner_of(stack[inside + 1:])
        result.by_owner[owner] += count
        if owner is Owner.CHECKER and charged is not None:
            result.by_line[charged.where()] += count
            result.by_module[os.path.relpath(charged.path, os.path.dirname(PACKAGE))] += count
        elif owner is Owner.THROUGH_WRAPPER and charged is not None:
            result.wrapped[charged.where()] += count
    return result


def _py_spy() -> str:
    """py-spy on PATH, or beside this interpreter (a virtualenv not activated)."""
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    found = shutil.which("py-spy") or (beside if os.access(beside, os.X_OK) else None)
    if found is None:
        raise SystemExit("where_time_goes: py-spy is not installed (pip install py-spy)")
    return found


def record(case_name: str, calls: int, rate: int, postgres: str | None,
           contender: str | None = None) -> tuple[Attribution, float]:
    """Run a contender of the case (its checked one by default) under py-spy; its attribution and
    the sampled seconds per call.

    py-spy exits 0 whatever the program it ran did, so the served requests are confirmed by
    ``serve_untimed``'s own count (:data:`benchmarks._compare.SERVED_ENV`): a run that failed,
    or stopped part way, is an error with its output, never shares of partial data.
    """
    spy = _py_spy()
    case = next(c for c in CASES if c.name == case_name)
    if postgres and not case.postgres:
        raise SystemExit(f"where_time_goes: the {case_name} case runs on SQLite only")
    with tempfile.TemporaryDirectory() as tmp:
        out, served = os.path.join(tmp, "samples.txt"), os.path.join(tmp, "served")
        command = [spy, "record", "--format", "raw", "--full-filenames", "--rate", str(rate), "-o", out, "--",
                   sys.executable, os.path.join(HERE, case.script), "--loop", contender or case.checked,
                   "--calls", str(calls)]
        if postgres:
            command += ["--postgres", postgres]
        done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, SERVED_ENV: served})
        told = open(served).read().strip() if os.path.exists(served) else None
        if done.returncode != 0 or not os.path.exists(out) or told != str(calls):
            raise SystemExit(f"where_time_goes: the run did not serve its {calls} requests (py-spy exit "
                             f"{done.returncode}, served: {told}):\n{done.stdout}{done.stderr}")
        with open(out) as f:
            result = attribute(f.readlines())
    if result.total == 0:
        raise SystemExit(f"where_time_goes: no sample inside {LOOP} (too few --calls for --rate?)")
    return result, result.total / rate / calls


def share_text(count: int, total: int) -> str:
    """``count`` of ``total`` samples as a percentage with its 95 % sampling error (binomial,
    normal approximation): a line of a few samples is not read as a cost."""
    share = count / total
    if count == 0:  # the normal approximation says ±0: the rule of three bounds it instead
        return f"{0:6.2f} % <{300 / total:.2f}"
    return f"{100 * share:6.2f} % ±{196 * math.sqrt(share * (1 - share) / total):.2f}"


def report(case_name: str, result: Attribution, per_call: float, top: int) -> str:
    total = result.total
    lines = [f"{case_name}: {total} samples inside the requests, about {per_call * 1e6:.0f} µs a request "
             "(sampled, py-spy's pauses included); shares with their 95 % sampling error"]
    for owner in Owner:
        lines.append(f"  {owner.value:40s} {share_text(result.by_owner[owner], total)}")
    lines.append("the checker's own, by module:")
    for module, count in result.by_module.most_common():
        lines.append(f"  {share_text(count, total)}  {count / total * per_call * 1e6:6.1f} µs  {module}")
    lines.append(f"the checker's own, top {top} lines:")
    for where, count in result.by_line.most_common(top):
        lines.append(f"  {share_text(count, total)}  {where}")
    if result.wrapped:
        lines.append("the host's work charged to a wrapper's call of the original:")
        for where, count in result.wrapped.most_common(top):
            lines.append(f"  {share_text(count, total)}  {where}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=[c.name for c in CASES if c.default], default="sqlalchemy-request")
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--rate", type=int, default=400, help="samples a second (py-spy --rate)")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--postgres", metavar="URL", help="the case on PostgreSQL (its script's --postgres)")
    parser.add_argument("--contender", help="another contender of the case's script (its --loop NAME), e.g. "
                                            "--case django-request --contender 'checked, sampler'")
    args = parser.parse_args()
    if args.calls < 1 or args.rate < 1:
        parser.error("--calls and --rate must be at least 1")
    result, per_call = record(args.case, args.calls, args.rate, args.postgres, args.contender)
    print(report(args.contender or args.case, result, per_call, args.top))


if __name__ == "__main__":
    main()
