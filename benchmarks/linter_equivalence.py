"""Does a change to the linter keep every finding?  The working tree against a revision,
on the bug corpus's releases, with everything shown.

    python benchmarks/linter_equivalence.py --against 2645c13          # bug-corpus releases
    python benchmarks/linter_equivalence.py --against 2645c13 --precision   # the big projects too

For a change meant to keep behaviour (a restructuring, a speed cut), the corpus scores
(``bench_linter_corpus.py``) are too coarse: they look at default settings and only at the
buggy functions.  This runs both linters with ``--min-confidence low`` and every quiet group
included (tests, migrations, scripts, commands), without the project index, on every
release the bug corpus pins (the
buggy and the fixed ones: about 85, 20 minutes on two cores; ``--precision`` adds the seven
judged projects, an hour more) and prints each release whose findings differ, with the
difference.  Exit status 1 when any does.  Releases are downloaded and cached as the
corpus benchmark does (``~/.cache/txnsafety-corpus``).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import sys

from corpus.entries import CorpusError, load_bugs, load_judged
from corpus.linters import at_revision, working_tree
from corpus.releases import ReleaseError, unpacked

EVERYTHING = ("--no-cache", "--min-confidence", "low", "--include-tests", "--include-migrations",
              "--include-scripts", "--include-commands")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", metavar="REV", required=True, help="the revision to compare with")
    parser.add_argument("--precision", action="store_true", help="also the precision corpus's projects")
    parser.add_argument("--project", action="append", default=[], help="only these PyPI names")
    args = parser.parse_args(argv)
    try:
        bugs = load_bugs()
        projects = load_judged() if args.precision else []
    except CorpusError as exc:
        print(f"linter_equivalence: {exc}", file=sys.stderr)
        return 2
    releases = {p.release for p in projects}
    for bug in bugs:
        releases.add(bug.buggy.release)
        if bug.fixed:
            releases.add(bug.fixed.release)
    if args.project:
        releases = {r for r in releases if r.name in args.project}
    mine, theirs = working_tree(), at_revision(args.against)
    roots = {}
    for release in sorted(releases, key=lambda r: (r.name, r.version)):
        try:
            roots[release] = unpacked(release)
        except ReleaseError as exc:
            print(f"  {release.label}: {exc}", file=sys.stderr)
    found = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        futures = {pool.submit(linter.run, root, EVERYTHING): (linter.label, release)
                   for release, root in roots.items() for linter in (mine, theirs)}
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            found[futures[future]] = future.result()
            print(f"\r  linted {done}/{len(futures)}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    differ = 0
    total = 0
    for release in roots:
        a, b = found[(mine.label, release)], found[(theirs.label, release)]
        total += len(a)
        if a == b:
            continue
        differ += 1
        print(f"{release.label}: {len(a)} findings with {mine.label}, {len(b)} with {theirs.label}")
        for f in sorted(set(a) - set(b), key=lambda f: (f.path, f.line, f.code)):
            print(f"  + {f.path}:{f.line} {f.code}")
        for f in sorted(set(b) - set(a), key=lambda f: (f.path, f.line, f.code)):
            print(f"  - {f.path}:{f.line} {f.code}")
    print(f"{len(roots)} releases, {total} findings with {mine.label}: "
          f"{differ} release(s) differ from {theirs.label}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
