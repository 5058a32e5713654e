"""``txnsafety demo``: lint the stomp lab, serve it, hammer it, count and report what was lost.

Exit status 0 when every fixed twin lost nothing, failed no request and was
reported by neither the checker nor the linter; 1 otherwise (so the command
doubles as an end-to-end check); 2 for bad options or a missing dependency.
"""
from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
import time
from contextlib import ExitStack
from typing import Any

SERVERS = ("wsgi", "asgi")
#: Beyond a second of "work" per request the run takes minutes and lock waits time out.
MAX_THINK_MS = 1000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The demo's options, on the ``demo`` subcommand's parser."""
    parser.add_argument("--requests", type=int, default=40, metavar="N",
                        help="requests per endpoint and server (default 40)")
    parser.add_argument("--concurrency", type=int, default=8, metavar="N",
                        help="concurrent client threads (default 8)")
    parser.add_argument("--think-ms", type=float, default=5.0, metavar="MS",
                        help="work each handler does between its read and its write (default 5)")
    parser.add_argument("--database", metavar="URL",
                        help="sqlite:///file.db or postgresql://user:pw@host/db (default: SQLite in a temp dir)")
    parser.add_argument("--locks", metavar="URL", default="memory://",
                        help="user write lock backend: memory:// (default), redis://, memcached://, postgresql://")
    parser.add_argument("--servers", default=",".join(SERVERS), metavar="LIST",
                        help="which servers to run: wsgi, asgi or both (default wsgi,asgi)")
    parser.add_argument("--report-dir", default="txnsafety-demo-report", metavar="DIR",
                        help="where report.html and report.json go (default ./txnsafety-demo-report)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def _check_options(args: argparse.Namespace) -> list[str]:
    problems = []
    if args.requests < 1:
        problems.append("--requests must be at least 1")
    if args.concurrency < 1:
        problems.append("--concurrency must be at least 1")
    if not (math.isfinite(args.think_ms) and 0 <= args.think_ms <= MAX_THINK_MS):
        problems.append(f"--think-ms must be a number from 0 to {MAX_THINK_MS}")
    servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    unknown = [s for s in servers if s not in SERVERS]
    if unknown or not servers:
        problems.append(f"--servers takes wsgi, asgi or both, not {args.servers!r}")
    args.server_list = [s for s in SERVERS if s in servers]
    return problems


def _missing_dependency() -> str | None:
    for module, package in (("sqlalchemy", "sqlalchemy"), ("uvicorn", "uvicorn"), ("tqdm", "tqdm")):
        try:
            __import__(module)
        except ImportError:
            return package
    return None


def run(args: argparse.Namespace) -> int:
    """Run the demo for parsed ``args``; returns the exit status (0 ok, 1 a fix failed, 2 bad setup)."""
    try:
        return _checked_run(args)
    except KeyboardInterrupt:
        print("\ntxnsafety demo: interrupted", file=sys.stderr)
        return 130


def _checked_run(args: argparse.Namespace) -> int:
    problems = _check_options(args)
    if problems:
        for problem in problems:
            print(f"txnsafety demo: {problem}", file=sys.stderr)
        return 2
    missing = _missing_dependency()
    if missing:
        print(f"txnsafety demo: needs {missing}; install the demo extra: pip install 'txnsafety[demo]'",
              file=sys.stderr)
        return 2
    with ExitStack() as stack:
        database = args.database
        if not database:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="txnsafety-demo-"))
            database = "sqlite:///" + os.path.join(tmp, "stomp_lab.sqlite3")
        try:
            return _run(args, database, stack)
        except _SetupError as exc:
            print(f"txnsafety demo: {exc}", file=sys.stderr)
            return 2


class _SetupError(Exception):
    """A URL that names nothing usable, or a server that cannot be reached."""


def _run(args: argparse.Namespace, database: str, stack: ExitStack) -> int:
    import txnsafety_lab
    from txnsafety_lab import catalog, database as lab_database, endpoints, models

    from . import html, static, summary
    from .load import listening
    from .timeline import Recorder

    started = time.perf_counter()
    lab_dir = os.path.dirname(txnsafety_lab.__file__)
    shown_db, shown_locks = redacted(database), redacted(args.locks)
    # Everything that can fail on the user's input fails now, before any output.
    _prepare_report_dir(args.report_dir)
    lab = _open(lab_database, database, args)
    stack.callback(lab.dispose)
    _configure_checker_and_locks(args, stack)
    print(f"txnsafety demo: the stomp lab on {shown_db}, user write locks on {shown_locks}\n")

    print("Step 1. The linter reads the lab's handlers (txnsafety_lab/endpoints.py):\n")
    try:
        findings = static.lint(lab_dir)
    except RuntimeError as exc:
        raise _SetupError(str(exc)) from None
    summary.print_findings(findings)

    recorder = stack.enter_context(
        Recorder(models.Base, [lab.Session, lab.DefaultSession], os.path.abspath(endpoints.__file__)))
    collector = stack.enter_context(listening())
    print(f"\nSteps 2 and 3. Each endpoint, racy and fixed, gets {args.requests} requests from "
          f"{args.concurrency} concurrent clients, on each server:\n")
    outcomes, reports = [], []
    for server in args.server_list:
        got, found = _serve_and_fire(server, lab, catalog.CLASSES, args, recorder, collector)
        outcomes += got
        reports += found

    verdict = summary.verdict(catalog.CLASSES, outcomes, findings)
    print()
    summary.print_table(catalog.CLASSES, outcomes, findings, args.server_list)
    result = html.Result(database=shown_db, locks=shown_locks, requests=args.requests,
                         concurrency=args.concurrency, think_ms=args.think_ms, servers=args.server_list,
                         classes=catalog.CLASSES, outcomes=outcomes, findings=findings, reports=reports,
                         verdict=verdict, seconds=time.perf_counter() - started)
    try:
        paths = html.write(result, args.report_dir, lab_dir)
    except OSError as exc:
        raise _SetupError(f"cannot write the report to {args.report_dir}: {exc.strerror or exc}") from None
    summary.print_reports(reports)
    summary.print_verdict(verdict, paths, result.seconds)
    return 0 if verdict["ok"] else 1


def _scrub(message: str, url: str) -> str:
    """A driver's error message, minus the URL's password should the driver quote it."""
    from urllib.parse import urlsplit
    password = urlsplit(url).password
    return message.replace(password, "***") if password else message


def _prepare_report_dir(directory: str) -> None:
    try:
        os.makedirs(directory, exist_ok=True)
        if not os.access(directory, os.W_OK):
            raise PermissionError(13, "not writable")
    except OSError as exc:
        raise _SetupError(f"--report-dir {directory}: {exc.strerror or exc}") from None


def redacted(url: str) -> str:
    """The URL without its password (the report may be shared)."""
    from txnsafety.locks.backend import redacted_url
    return redacted_url(url)


def _open(lab_database: Any, database: str, args: argparse.Namespace) -> Any:
    try:
        return lab_database.open_lab(database, pool_size=args.concurrency + 2, think=args.think_ms / 1000)
    except ValueError as exc:
        raise _SetupError(f"--database {redacted(database)}: {exc}") from None
    except Exception as exc:  # a server that is down, a bad password: say so, no traceback
        raise _SetupError(f"cannot open the database {redacted(database)}: {type(exc).__name__}: "
                          f"{str(exc).splitlines()[0] if str(exc) else ''}") from None


def _configure_checker_and_locks(args: argparse.Namespace, stack: ExitStack) -> None:
    """Collect every report with its read site; the locks on ``--locks``; both put back afterwards."""
    import txnsafety
    from txnsafety import locks
    from txnsafety.config import settings
    from txnsafety.locks import config as lock_config

    before = (settings.mode, settings.read_sites)
    txnsafety.configure(mode="collect", read_sites="always")  # every report names its read site
    stack.callback(lambda: txnsafety.configure(mode=before[0], read_sites=before[1]))
    url_before, options_before = lock_config.default_url(), locks.options()
    stack.callback(lambda: locks.configure(url=url_before, **options_before.__dict__))
    # A fixed twin waits for the lock behind every other client's read-modify-write: let it.
    wait = max(10.0, 3 * args.concurrency * args.think_ms / 1000)
    try:
        locks.configure(url=args.locks, wait_timeout=wait)
        stack.callback(locks.close_backends)
        with locks.user_write_lock("txnsafety-demo:probe", wait_timeout=10, on_backend_error="fail_closed"):
            pass  # the backend answers now, not with a 500 in the middle of the run
    except Exception as exc:
        raise _SetupError(f"cannot use the lock backend {redacted(args.locks)}: "
                          f"{type(exc).__name__}: {_scrub(str(exc), args.locks)}") from None


def _serve_and_fire(server: str, lab: Any, classes: Any, args: argparse.Namespace, recorder: Any,
                    collector: Any) -> tuple[list[Any], list[dict[str, Any]]]:
    from tqdm import tqdm
    from txnsafety_lab import web

    from .load import Outcome, distinct_reports, fire
    from .servers import asgi_server, wsgi_server

    if server == "wsgi":
        from txnsafety.wsgi import TxnSafetyMiddleware
        serving, label = wsgi_server(TxnSafetyMiddleware(web.wsgi_app(lab))), "WSGI (threaded wsgiref)"
    else:
        from txnsafety.asgi import TxnSafetyASGIMiddleware
        serving, label = asgi_server(TxnSafetyASGIMiddleware(web.asgi_app(lab))), "ASGI (uvicorn)"
    plan = [(c, v) for c in classes for v in c.variants]
    outcomes, reports = [], []
    # tqdm draws only on a terminal (disable=None); a log gets one line per server instead.
    size = shutil.get_terminal_size((100, 24))  # a pty that reports 0x0 would hide the bar
    with serving as base, tqdm(total=len(plan) * args.requests, unit="req", leave=True, file=sys.stderr,
                               ncols=min(110, size.columns), nrows=size.lines,
                               disable=True if args.no_progress else None,
                               bar_format="{desc} {bar:20} {n_fmt}/{total_fmt}") as bar:
        drawn = not bar.disable
        for stomp_class, variant in plan:
            bar.set_description_str(f"{label:<24} {stomp_class.slug + ' / ' + variant.name:<35}")
            lab.reset()
            recorder.clear()
            collector.take()
            t0 = time.perf_counter()
            failed = fire(f"{base}/run/{stomp_class.slug}/{variant.name}", args.requests, args.concurrency,
                          bar.update)
            seconds = time.perf_counter() - t0
            with lab.measure.connect() as conn:
                stored = variant.stored(conn)
            violations = collector.take()
            # A failed request (a 500) wrote nothing: only the answered ones were owed a write.
            outcome = Outcome(server, stomp_class.slug, variant.name, args.requests, failed,
                              variant.expected(args.requests - failed), stored, seconds, variant.unit)
            outcome.codes.update(v.code.value for v in violations)
            outcomes.append(outcome)
            reports += distinct_reports(violations, recorder, server, stomp_class.slug, variant.name)
        bar.set_description_str(f"{label:<24} {'done':<35}")
    if not drawn and not args.no_progress:
        print(f"  {label}: {len(plan) * args.requests} requests served", file=sys.stderr)
    return outcomes, reports
