"""The ``txnsafety`` command: ``lint``, ``demo`` and ``codes``.

Each subcommand lives in its own module and is imported only when chosen, so
``txnsafety lint`` does not pay for the runtime checker and vice versa.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from . import __version__


def _lint(argv: Sequence[str]) -> int:
    try:
        from txnsafety_lint.cli import main as lint_main
    except ImportError as exc:  # installed without the `lint` extra (libcst, pathspec)
        print(f"txnsafety lint: the linter needs the lint extra ({exc.name} is missing): "
              "pip install 'txnsafety[lint]'", file=sys.stderr)
        return 2
    return lint_main(list(argv))


def _codes(code: str | None) -> int:
    from .codes import CODES, Code
    if code is None:
        for c in Code:
            print(f"{c.value}  {c.kind:<26}{c.summary}")
        return 0
    from .code_pages import page
    text = page(code)
    if text is None:
        known = code.strip().upper() in CODES
        why = "its page is not installed" if known else f"unknown code (known: {', '.join(CODES)})"
        print(f"txnsafety codes: {code}: {why}", file=sys.stderr)
        return 2
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="txnsafety",
        description="Catch lost writes (data stomping): static linter, runtime checker, user write lock.")
    parser.add_argument("--version", action="version", version=f"txnsafety {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("lint", add_help=False,
                   help="find stomping bugs in source files (txnsafety lint --help)")
    from .demo import command as demo
    demo.add_arguments(sub.add_parser(
        "demo", help="the stomp lab: lint, serve and hammer a racy app and its fixed twins, report what was lost",
        description="Lint the bundled stomp lab, serve it under the checker with a real WSGI and ASGI server, "
                    "fire concurrent clients at each racy endpoint and its fixed twins, count the writes lost, "
                    "and write an HTML and JSON report. Exit status 1 if a fixed twin loses a write or is "
                    "reported."))
    codes = sub.add_parser("codes", help="list the TXN codes, or print one code's page",
                           description="Without CODE: one line per code. With CODE (TXN102): "
                                       "its page (docs/codes/TXN102.md), offline.")
    codes.add_argument("code", nargs="?", help="a code, e.g. TXN102")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run a subcommand; output cut short by a closed pipe (``| head``) is no error."""
    try:
        return _main(argv)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's own flush at exit must not fail again
        return 0


def _main(argv: Sequence[str] | None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["lint"]:
        return _lint(args_list[1:])
    parser = build_parser()
    args = parser.parse_args(args_list)
    if args.command == "demo":
        from .demo import command as demo
        return demo.run(args)
    if args.command == "codes":
        return _codes(args.code)
    parser.print_help()
    return 0 if args.command is None and not args_list else 2


if __name__ == "__main__":
    sys.exit(main())
