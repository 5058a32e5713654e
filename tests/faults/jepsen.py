"""The fault suite's harness: clients, a nemesis, and a judge (after Jepsen).

A run starts worker processes (:mod:`tests.faults.worker`) that increment one
counter in a transaction-less store under one lock, through a fault-injecting
proxy in front of the lock server.  Meanwhile a nemesis cycles through faults,
each healed before the next: kill -9 a client (a fresh one replaces it),
SIGSTOP a client past its lease, restart the lock server losing all state,
evict the lock's item, cut every connection, stall the proxy past the socket
timeout, lose one reply.  Then the judge reads the store and every client's
history and counts:

* **lost** -- accepted writes the final value does not reflect, plus acknowledged
  operations missing from the store;
* **duplicated** -- operations the store applied more than once;
* **unfenced** -- accepted writes whose fence did not exceed the previous
  accepted write's (two holders the fence could not tell apart);
* **fences backwards** -- a grant whose fence is not above that of a grant that
  completed before it was asked for (real-time order, CLOCK_MONOTONIC being
  system-wide).

All four must be 0.  :func:`run` returns the counts with what happened.
"""
from __future__ import annotations

import bisect
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from tests.faults.proxy import FaultProxy
from tests.faults.servers import OwnServer
from tests.locks.fenced_store import FencedStore
from txnsafety.locks import backend_from_url

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Target:
    """What the clients lock on, and what the nemesis can do to it."""

    name: str
    url: str                      # through the proxy
    proxy: FaultProxy
    direct_url: str               # around the proxy: for the nemesis' own look-ups
    key: str = field(default_factory=lambda: f"jepsen-{os.getpid()}-{time.monotonic_ns()}")
    server: OwnServer | None = None               # ours: can be restarted
    #: drop the lock's item as an eviction would (given the key)
    evict: Callable[[str], None] | None = None
    #: end the clients' server sessions from the server side (given their pids)
    kill_sessions: Callable[[list[int]], None] | None = None


@dataclass
class Outcome:
    backend: str
    operations: int = 0
    acknowledged: int = 0
    accepted_writes: int = 0
    final_value: int = 0
    lost: int = 0
    duplicated: int = 0
    unfenced: int = 0
    fences_backwards: int = 0
    grants: int = 0
    client_errors: Counter = field(default_factory=Counter)
    stomp_reports: int = 0
    faults: Counter = field(default_factory=Counter)

    def line(self) -> str:
        errors = ", ".join(f"{k} {v}" for k, v in sorted(self.client_errors.items())) or "none"
        faults = ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items()))
        return (f"{self.backend}: lost {self.lost}, duplicated {self.duplicated}, unfenced {self.unfenced}, "
                f"fences backwards {self.fences_backwards} | {self.acknowledged} acknowledged of "
                f"{self.operations} operations, {self.accepted_writes} writes accepted, final value "
                f"{self.final_value}, {self.grants} grants, TXN104 reports {self.stomp_reports}, "
                f"client errors: {errors} | faults: {faults}")

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["client_errors"], d["faults"] = dict(self.client_errors), dict(self.faults)
        return d


class Run:
    def __init__(self, target: Target, workdir: Path, *, clients: int = 8, lease: float = 1.0,
                 wait: float = 3.0, duration: float = 10.0) -> None:
        self.target, self.workdir = target, workdir
        self.clients, self.lease, self.wait, self.duration = clients, lease, wait, duration
        self.key = target.key
        self.store_path = workdir / "store.json"
        self.stop_file = workdir / "stop"
        self.procs: dict[str, subprocess.Popen] = {}
        self.ids = itertools.count()
        self.outcome = Outcome(target.name)

    # -- clients -----------------------------------------------------------------------
    def _spawn(self) -> None:
        wid = f"w{next(self.ids)}"
        self.procs[wid] = subprocess.Popen(
            [sys.executable, "-m", "tests.faults.worker", self.target.url, self.key, str(self.lease),
             str(self.wait), str(self.store_path), str(self.workdir / f"{wid}.jsonl"), wid,
             str(self.stop_file)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def _victim(self) -> tuple[str, subprocess.Popen] | None:
        alive = [(w, p) for w, p in self.procs.items() if p.poll() is None]
        return alive[next(self.ids) % len(alive)] if alive else None

    # -- nemesis -----------------------------------------------------------------------
    def _faults(self) -> list[tuple[str, Callable[[], None]]]:
        t = self.target
        faults: list[tuple[str, Callable[[], None]]] = [
            ("kill -9 client", self._kill_client),
            ("SIGSTOP client past its lease", self._pause_client),
            ("SIGSTOP the holder past its lease", self._pause_holder),
            ("connection cut", t.proxy.cut),
            ("stall past the socket timeout", self._stall),
            ("lost reply", lambda: t.proxy.lose_reply(lambda data: True)),
        ]
        if t.server is not None:
            faults.append(("server restart losing all state", t.server.restart))
        if t.evict is not None:
            evict = t.evict
            faults.append(("lock item evicted", lambda: evict(self.key)))
        if t.kill_sessions is not None:
            kill = t.kill_sessions
            faults.append(("server killed the sessions",
                           lambda: kill([p.pid for p in self.procs.values() if p.poll() is None])))
        return faults

    def _kill_client(self) -> None:
        victim = self._victim()
        if victim:
            victim[1].kill()
            victim[1].wait(10)
            self._spawn()

    def _pause_client(self) -> None:
        victim = self._victim()
        if victim:
            os.kill(victim[1].pid, signal.SIGSTOP)
            time.sleep(self.lease + 1.5)     # past the lease (memcached: past its whole-second TTL)
            os.kill(victim[1].pid, signal.SIGCONT)

    def _pause_holder(self) -> None:
        """Stop whoever holds the lock now -- most likely between its check and its
        write -- and wake it up when the next holder has the lock, so that its late
        write lands while the next holder computes from what it read."""
        backend = backend_from_url(self.target.direct_url)
        try:
            pid = _pid_of(backend.holder(self.key))
            if not pid or not any(p.pid == pid and p.poll() is None for p in self.procs.values()):
                return
            os.kill(pid, signal.SIGSTOP)
            try:
                time.sleep(self.lease)
                until = time.monotonic() + 3.0      # memcached: up to its whole-second TTL more
                while time.monotonic() < until and _pid_of(backend.holder(self.key)) in (0, pid):
                    time.sleep(0.001)
            finally:
                os.kill(pid, signal.SIGCONT)
        finally:
            backend.close()

    def _stall(self) -> None:
        self.target.proxy.stall()
        time.sleep(2.5)                        # past every backend's socket timeout here
        self.target.proxy.resume()

    def fault_names(self) -> set[str]:
        return {name for name, _ in self._faults()}

    def _nemesis(self, stop: threading.Event, cycled: threading.Event) -> None:
        faults = self._faults()
        for i, (name, fault) in enumerate(itertools.cycle(faults), 1):
            if stop.wait(0.5):
                return
            fault()
            self.outcome.faults[name] += 1
            if i == len(faults):
                cycled.set()

    # -- the run -----------------------------------------------------------------------
    def run(self) -> Outcome:
        FencedStore(str(self.store_path)).write(0, 0, None)
        for _ in range(self.clients):
            self._spawn()
        stop, cycled = threading.Event(), threading.Event()
        nemesis = threading.Thread(target=self._nemesis, args=(stop, cycled), daemon=True)
        nemesis.start()
        time.sleep(self.duration)
        cycled.wait(60)                       # every fault at least once
        stop.set()
        nemesis.join(30)
        self.target.proxy.resume()
        time.sleep(self.lease + 1.0)          # healed: let the clients make progress again
        self.stop_file.touch()
        for proc in self.procs.values():
            try:
                proc.wait(self.wait + 10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        return self.judge()

    # -- the judge ---------------------------------------------------------------------
    def judge(self) -> Outcome:
        out = self.outcome
        state = FencedStore(str(self.store_path)).read()
        log = state["log"][1:]                              # the first entry is the setup
        out.accepted_writes, out.final_value = len(log), state["value"]
        histories = [json.loads(line) for p in sorted(self.workdir.glob("w*.jsonl"))
                     for line in p.read_text().splitlines() if line]
        acked = {h["op"] for h in histories if h["t"] == "ack"}
        out.operations = len({h["op"] for h in histories if h["t"] == "invoke"})
        out.acknowledged = len(acked)
        out.client_errors = Counter(h["err"] for h in histories if h["t"] == "fail")
        out.stomp_reports = sum(h["t"] == "stomp" for h in histories)
        applied = Counter(op for _, op, _ in log)
        out.duplicated = sum(n - 1 for n in applied.values() if n > 1)
        out.lost = max(0, out.accepted_writes - out.final_value) + len(acked - set(applied))
        out.unfenced = sum(1 for prev, cur in zip(log, log[1:]) if cur[0] <= prev[0])
        grants = sorted((h["asked"], h["at"], h["fence"]) for h in histories if h["t"] == "acquired")
        out.grants = len(grants)
        out.fences_backwards = _backwards(grants)
        return out


def _pid_of(owner: str | None) -> int:
    """The pid in an owner label ("request … on host pid 123"), or 0."""
    return int(owner.rpartition(" pid ")[2]) if owner and " pid " in owner else 0


def _backwards(grants: list[tuple[float, float, int]]) -> int:
    """Grants whose fence is not above every fence granted before they were asked for."""
    by_done = sorted((at, fence) for _, at, fence in grants)
    done_times = [at for at, _ in by_done]
    running_max, best = [], 0
    for _, fence in by_done:
        best = max(best, fence)
        running_max.append(best)
    bad = 0
    for asked, _, fence in grants:
        i = bisect.bisect_left(done_times, asked)   # grants completed strictly before the ask
        if i and running_max[i - 1] >= fence:
            bad += 1
    return bad
