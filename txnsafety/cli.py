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
    from txnsafety_lint.cli import main as lint_main
    return lint_main(list(argv))


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
    sub.add_parser("codes", help="list the TXN codes")
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
        from .codes import Code
        for code in Code:
            print(f"{code.value}  {code.kind:<26}{code.summary}")
        return 0
    parser.print_help()
    return 0 if args.command is None and not args_list else 2


if __name__ == "__main__":
    sys.exit(main())
