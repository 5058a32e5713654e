"""Benchmark: the linter at one revision against another (or the working tree), side by side.

A restructuring or a speed cut must keep the linter's speed; this times both on the same real
projects in one run:

    python benchmarks/bench_linter_revisions.py --base 859a1e5                       # vs the working tree
    python benchmarks/bench_linter_revisions.py --base 859a1e5 --contender 2c64dcd --rounds 5
    python benchmarks/bench_linter_revisions.py --base main --project khoj --project flaskbb

Each round runs ``txnsafety lint --no-cache --format json`` once per linter per project, in
fresh processes, the two linters' order alternating from round to round (the machine here is
shared and noisy: interleaving spreads its noise over both). It reports the CPU seconds of
each process (user + system: steadier than wall time on a busy machine), the median per
project and linter, and the ratio contender / base per project and pooled over all runs
(the sum of the contender's medians over the base's). Projects are corpus releases already
unpacked in the cache (``~/.cache/txnsafety-corpus/unpacked``: run
``bench_linter_corpus.py`` once to fill it); ``--project`` picks them by name prefix.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

from corpus.linters import Linter, at_revision, working_tree
from corpus.releases import cache_dir

DEFAULT_PROJECTS = ("khoj-", "django-cms-", "flaskbb-", "open-webui-", "ethyca-fides-")


def cpu_seconds(linter: Linter, root: Path) -> float:
    """CPU seconds (user + system) of one fresh ``txnsafety lint`` process on ``root``."""
    env = dict(os.environ)
    if linter.pythonpath:
        env["PYTHONPATH"] = linter.pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-m", "txnsafety_lint", "--no-cache", "--format", "json",
                    "--exit-zero", "."], cwd=root, env=env, capture_output=True, check=True, timeout=3600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, metavar="REV", help="the revision to compare with")
    parser.add_argument("--contender", metavar="REV", help="another revision (default: the working tree)")
    parser.add_argument("--project", action="append", default=[], help="unpacked release name prefix")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    unpacked = cache_dir() / "unpacked"
    prefixes = tuple(args.project) or DEFAULT_PROJECTS
    roots = sorted(p for p in unpacked.iterdir() if p.is_dir() and p.name.startswith(prefixes)) \
        if unpacked.is_dir() else []
    if not roots:
        print(f"bench_linter_revisions: no unpacked release in {unpacked} matches {', '.join(prefixes)}",
              file=sys.stderr)
        return 2
    base = at_revision(args.base)
    contender = at_revision(args.contender) if args.contender else working_tree()
    times: dict[tuple[str, str], list[float]] = {}
    for round_ in range(args.rounds):
        order = (base, contender) if round_ % 2 == 0 else (contender, base)
        for root in roots:
            for linter in order:
                times.setdefault((linter.label, root.name), []).append(cpu_seconds(linter, root))
        print(f"  round {round_ + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    print(f"{'project':40} {base.label:>12} {contender.label:>14} {'ratio':>7}")
    total_base = total_contender = 0.0
    for root in roots:
        b = statistics.median(times[(base.label, root.name)])
        c = statistics.median(times[(contender.label, root.name)])
        total_base, total_contender = total_base + b, total_contender + c
        print(f"{root.name:40} {b:11.2f}s {c:13.2f}s {c / b:7.3f}")
    print(f"{'pooled (sum of medians)':40} {total_base:11.2f}s {total_contender:13.2f}s "
          f"{total_contender / total_base:7.3f}")
    spread = [max(v) / min(v) for v in times.values() if min(v) > 0]
    print(f"largest max/min spread of one linter on one project over {args.rounds} rounds: "
          f"{max(spread):.3f} (differences below it are noise)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
