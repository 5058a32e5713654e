"""A lock holder in its own process, driven by the tests through stdin/stdout.

    python -m tests.locks.holder URL KEY LEASE STORE

Acquires ``KEY``, prints ``HELD <fence>``, waits for a line on stdin (the test
may SIGSTOP / kill -9 it meanwhile), then tries a fenced write to ``STORE`` and
prints what happened: ``WRITE accepted|rejected``, ``LIVE yes|no``,
``REPORTED <codes>``.
"""
from __future__ import annotations

import sys

from tests.locks.fenced_store import FencedStore
from txnsafety.config import configure as configure_checker
from txnsafety.locks import LeaseLost, backend_from_url, global_lock
from txnsafety.report import add_listener


def main() -> None:
    url, key, lease_s, store_path = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    configure_checker(mode="collect")
    reported: list[str] = []
    add_listener(lambda v: reported.append(v.code.value))
    backend = backend_from_url(url)
    with global_lock(key, backend=backend, lease=lease_s, wait_timeout=10) as lease:
        print("HELD", lease.fence, flush=True)
        sys.stdin.readline()
        ok = FencedStore(store_path).write(lease.fence, f"late write by fence {lease.fence}")
        print("WRITE", "accepted" if ok else "rejected", flush=True)
        try:
            lease.ensure_held()
            print("LIVE yes", flush=True)
        except LeaseLost:
            print("LIVE no", flush=True)
    print("REPORTED", ",".join(reported) or "-", flush=True)


if __name__ == "__main__":
    main()
