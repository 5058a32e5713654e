"""A counter increment under a lock, in its own process, paused by the test between
its ``ensure_held()`` and its write.

    python -m tests.locks.recipe_holder URL KEY LEASE STORE RECIPE

``STORE`` is a file path (the transaction-less :class:`FencedStore`) or a
``postgresql://...#table`` URL (a row updated with :mod:`txnsafety.locks.fencing`).
``RECIPE`` is ``claim`` (the documented recipe: claim the row with the fence,
then read) or ``write-only`` (read plainly, fence only the write).  Prints
``READY <fence>`` once it has read and passed ``ensure_held()``, waits for a
line on stdin, writes value + 1 and prints ``WRITE accepted|rejected``.
"""
from __future__ import annotations

import sys

from tests.locks.counter_stores import open_store
from txnsafety.config import configure as configure_checker
from txnsafety.locks import backend_from_url, global_lock


def main() -> None:
    url, key, lease_s, store_spec, recipe = sys.argv[1:6]
    configure_checker(mode="collect")
    store = open_store(store_spec)
    backend = backend_from_url(url)
    with global_lock(key, backend=backend, lease=float(lease_s), wait_timeout=10) as lease:
        value = store.read(lease.fence, claim=recipe == "claim")
        lease.ensure_held()
        print("READY", lease.fence, flush=True)
        sys.stdin.readline()
        ok = store.write(lease.fence, value + 1)
        print("WRITE", "accepted" if ok else "rejected", flush=True)


if __name__ == "__main__":
    main()
