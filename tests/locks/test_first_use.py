"""80 processes use the PostgreSQL backend for the first time at once: none fails.

The backend creates its fence sequence on first use.  ``CREATE SEQUENCE IF NOT
EXISTS`` is not safe under concurrency: two sessions that both find it missing
both insert catalog rows, and the loser fails with a UniqueViolation on
``pg_type``/``pg_class``.  Each run uses a sequence name nobody used before.
"""
from __future__ import annotations

import multiprocessing
import traceback
import uuid

import psycopg

from txnsafety.locks import backend_from_url, global_lock

N_PROCS = 80


def _first_use(url: str, key: str, barrier, errors) -> None:  # noqa: ANN001
    backend = backend_from_url(url)
    barrier.wait(60)
    try:
        with global_lock(key, backend=backend, lease=30, wait_timeout=30) as lease:
            assert lease.fence > 0
    except Exception:
        errors.put(traceback.format_exc(limit=3))
        raise SystemExit(1) from None
    finally:
        backend.close()


def test_80_processes_first_use_at_once(postgres_url: str) -> None:
    sequence = f"txnsafety_first_{uuid.uuid4().hex[:12]}"
    url = f"{postgres_url}{'&' if '?' in postgres_url else '?'}fence_sequence={sequence}"
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(N_PROCS)
    errors = ctx.Queue()
    procs = [ctx.Process(target=_first_use, args=(url, f"first-{sequence}-{i}", barrier, errors))
             for i in range(N_PROCS)]
    try:
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
        failed = [p.exitcode for p in procs if p.exitcode != 0]
        messages = []
        while not errors.empty():
            messages.append(errors.get())
        assert not failed, f"{len(failed)} of {N_PROCS} failed:\n" + "\n".join(messages[:3])
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f"DROP SEQUENCE IF EXISTS {sequence}")
