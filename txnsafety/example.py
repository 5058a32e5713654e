"""``txnsafety example``: the bundled points app, under the checker, under load.

It serves ``fixtures/wsgi_asgi/points.py`` (SQLite, generic API) with a real
threaded WSGI server behind :class:`~txnsafety.wsgi.TxnSafetyMiddleware`, fires
concurrent clients at the racy endpoint and at its fixed twin, and prints what
was lost and what the checker reported.  Exit status 1 if the fixed twin loses a
write or is reported, so the command doubles as an end-to-end check.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any


def _import_fixtures() -> Any:
    """The example app lives in the source tree's ``fixtures/`` (an editable install)."""
    root = Path(__file__).resolve().parent.parent
    if not (root / "fixtures" / "wsgi_asgi" / "points.py").exists():
        raise SystemExit("txnsafety example: the example app ships in the source tree (fixtures/); "
                         "run it from a clone installed with `pip install -e .`")
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from fixtures.wsgi_asgi import points
    return points


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--requests", type=int, default=200, help="requests per endpoint (default 200)")
    parser.add_argument("--concurrency", type=int, default=8, help="client threads (default 8)")
    parser.add_argument("--think-ms", type=float, default=2.0,
                        help="work the racy handler does between read and write (default 2 ms)")


def run(args: argparse.Namespace) -> int:
    if args.requests < 1 or args.concurrency < 1 or args.think_ms < 0:
        print("txnsafety example: --requests and --concurrency must be >= 1, --think-ms >= 0", file=sys.stderr)
        return 2
    points = _import_fixtures()
    import txnsafety
    from txnsafety.wsgi import TxnSafetyMiddleware
    from fixtures.http_servers import wsgi_server  # the same real server the tests use

    txnsafety.configure(mode="collect")
    reports: list[Any] = []
    txnsafety.add_listener(reports.append)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        store = points.make_store(os.path.join(tmp, "points.sqlite3"))
        app = TxnSafetyMiddleware(points.wsgi_app(store, think=args.think_ms / 1000))
        with wsgi_server(app) as url:
            for endpoint in ("racy", "fixed"):
                store.conn.execute("UPDATE wallet SET points = 0 WHERE id = 1")
                reports.clear()
                started = time.perf_counter()
                _fire(f"{url}/{endpoint}/add?n=1", args.requests, args.concurrency)
                elapsed = time.perf_counter() - started
                stored = store.conn.execute("SELECT points FROM wallet WHERE id = 1").fetchone()[0]
                rows.append((endpoint, args.requests, stored, args.requests - stored,
                             Counter(v.code.value for v in reports), elapsed, list(reports[:1])))
        store.close()
    _print(rows)
    racy, fixed = rows
    return 0 if fixed[3] == 0 and not fixed[4] and racy[4] else 1


def _fire(url: str, total: int, concurrency: int) -> None:
    counter = iter(range(total))
    lock = threading.Lock()

    def client() -> None:
        while True:
            with lock:
                if next(counter, None) is None:
                    return
            with urllib.request.urlopen(url, timeout=60) as response:
                response.read()

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _print(rows: list[tuple[Any, ...]]) -> None:
    print("txnsafety example: points app (SQLite, memory locks) under a threaded WSGI server\n")
    print(f"{'endpoint':<10}{'requests':>9}{'stored':>8}{'lost':>6}  {'runtime reports':<24}{'seconds':>8}")
    for endpoint, requests, stored, lost, codes, elapsed, _ in rows:
        shown = ", ".join(f"{c} x{n}" for c, n in sorted(codes.items())) or "none"
        print(f"{endpoint:<10}{requests:>9}{stored:>8}{lost:>6}  {shown:<24}{elapsed:>8.2f}")
    sample = rows[0][6]
    if sample:
        print("\nOne report from the racy endpoint (deduplicated per request; no field values):\n")
        print(sample[0])
    print("\nThe fix: read, modify and write inside one transaction (fixtures/wsgi_asgi/points.py: fixed_add).")
