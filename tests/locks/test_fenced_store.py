"""The fault suite's store survives the faults it is used under: a client killed mid-step.

The fault suite (``tests/faults``) kills clients with SIGKILL while they write to the
:class:`~tests.locks.fenced_store.FencedStore`.  Its verdict (lost, duplicated, unfenced
writes) is only worth something if a kill can never damage the record itself: a record
emptied by a kill between truncating the file and writing it made the suite start counting
again from nothing and report writes as lost that the lock service never lost.
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.locks.fenced_store import FencedStore

ROOT = Path(__file__).resolve().parents[2]

#: a child that appends to the store as fast as it can, each write one step
_WRITER = """
import sys
from tests.locks.fenced_store import FencedStore
store = FencedStore(sys.argv[1])
n = 0
while True:
    n += 1
    store.write(1, n, f"op-{n}")
"""


def test_a_writer_killed_anywhere_leaves_the_record_whole(tmp_path: Path) -> None:
    path = tmp_path / "store"
    # a large record, as a long fault-suite run makes: each step rewrites all of it
    path.write_text(json.dumps({"fence": 1, "value": 0, "log": [[1, f"seed-{i}", 0] for i in range(60_000)]}))
    store, rng, seen = FencedStore(str(path)), random.Random(31), 60_000
    for _ in range(60):
        child = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)], cwd=ROOT,
                                 env={**os.environ, "PYTHONPATH": str(ROOT)})
        time.sleep(0.15 + rng.random() * 0.2)
        child.send_signal(signal.SIGKILL)
        child.wait()
        record = store.read()                       # parses: never empty, never half written
        assert len(record["log"]) >= seen           # nothing accepted before is gone
        seen = len(record["log"])
        assert record["log"][:3] == [[1, "seed-0", 0], [1, "seed-1", 0], [1, "seed-2", 0]]
    assert seen > 60_000                            # the children did write
