"""The fencing recipe holds against a holder paused between its check and its write.

A real holder process reads the counter, passes ``ensure_held()`` and is stopped
(SIGSTOP) before its write, past its lease.  The next holder reads and, while it
computes, the paused one wakes up and writes.  With the write-only fence check
the late write gets through (the store has seen no higher fence yet) and the
next holder's write, computed from the older read, overwrites it: one
acknowledged increment is lost.  With the documented recipe (claim the row with
the fence before reading) the late write is refused and nothing is lost.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.locks.counter_stores import PostgresCounter, open_store
from tests.locks.test_processes import ROOT, _lease_for
from txnsafety.locks import FenceRejected, global_lock


@pytest.fixture(params=["file", "postgresql-row"])
def store_spec(request: pytest.FixtureRequest, tmp_path: Path):  # noqa: ANN201
    if request.param == "file":
        yield str(tmp_path / "counter")
        return
    url = request.getfixturevalue("postgres_url")
    table = f"txnsafety_recipe_{uuid.uuid4().hex[:10]}"
    store = PostgresCounter.create(url, table)
    yield f"{url}#{table}"
    store.drop()


@pytest.mark.parametrize("recipe, lost", [("write-only", 1), ("claim", 0)])
def test_holder_paused_after_ensure_held_loses_no_update(server_url: str, key: str, store_spec: str,
                                                         recipe: str, lost: int) -> None:
    store = open_store(store_spec)
    proc = subprocess.Popen([sys.executable, "-m", "tests.locks.recipe_holder", server_url, key,
                             str(_lease_for(server_url)), store_spec, recipe],
                            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("READY "), line
        paused_fence = int(line.split()[1])
        os.kill(proc.pid, signal.SIGSTOP)           # between ensure_held() and the write
        with global_lock(key, backend=server_url, wait_timeout=10, priority="interactive") as mine:
            assert mine.fence > paused_fence      # granted once the paused holder's lease ended
            value = store.read(mine.fence, claim=recipe == "claim")
            os.kill(proc.pid, signal.SIGCONT)     # the late write lands while we compute
            proc.stdin.write("go\n")
            proc.stdin.flush()
            late = proc.stdout.readline().strip()
            mine.ensure_held()
            ours = store.write(mine.fence, value + 1)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait(5)
    acknowledged = (late == "WRITE accepted") + ours
    assert ours
    assert acknowledged - store.value() == lost
    if recipe == "claim":
        assert late == "WRITE rejected"


def test_claim_and_update_refuse_an_older_fence(postgres_url: str) -> None:
    table = f"txnsafety_recipe_{uuid.uuid4().hex[:10]}"
    store = PostgresCounter.create(postgres_url, table)
    try:
        from txnsafety.locks import claim_row, fenced_update
        cur = store.conn.cursor()
        assert claim_row(cur, table, {"id": 1}, 7, columns=["value", "lock_fence"]) == (0, 7)
        with pytest.raises(FenceRejected, match="nothing was written"):
            fenced_update(cur, table, {"id": 1}, {"value": 5}, 6)
        with pytest.raises(FenceRejected):
            claim_row(cur, table, {"id": 1}, 6)
        assert fenced_update(cur, table, {"id": 1}, {"value": 5}, 7)
        assert claim_row(cur, table, {"id": 2}, 8) is None           # no such row
        assert not fenced_update(cur, table, {"id": 2}, {"value": 1}, 8)
        with pytest.raises(ValueError):
            claim_row(cur, "t; DROP TABLE x", {"id": 1}, 9)
    finally:
        store.drop()


def test_claim_row_speaks_sqlite_qmark(tmp_path: Path) -> None:
    import sqlite3

    from txnsafety.locks import claim_row, fenced_update
    conn = sqlite3.connect(tmp_path / "db.sqlite", isolation_level=None)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER, lock_fence INTEGER NOT NULL DEFAULT 0)")
    conn.execute("INSERT INTO t (id, v) VALUES (1, 10)")
    cur = conn.cursor()
    assert claim_row(cur, "t", {"id": 1}, 3, columns=["v"]) == (10,)
    assert fenced_update(cur, "t", {"id": 1}, {"v": 11}, 3)
    with pytest.raises(FenceRejected):
        fenced_update(cur, "t", {"id": 1}, {"v": 12}, 2)
    assert conn.execute("SELECT v, lock_fence FROM t").fetchone() == (11, 3)
