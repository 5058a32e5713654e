"""Steps 2 and 3: serve the lab under the checker, fire concurrent clients, count the damage.

For every variant (racy first, then its fixed twins) the tables are reset,
``requests`` POSTs go to the variant's route from ``concurrency`` client threads
over real HTTP, and then the row is read back through a connection the checker
never sees: what N requests should have left minus what they did leave is the
number of writes lost (or, for check-then-act, duplicated).  The checker's
reports of the same requests are collected alongside, each distinct report with
the timeline of one race that produced it.
"""
from __future__ import annotations

import itertools
import queue
import threading
import urllib.error
import urllib.request
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import txnsafety
from txnsafety.codes import Code

from .timeline import Recorder, race


@dataclass
class Outcome:
    """One variant served by one server: what was asked, what was stored, what was reported."""

    server: str
    class_slug: str
    variant: str
    requests: int
    failed: int
    expected: int
    stored: int
    seconds: float
    unit: int = 1
    codes: Counter = field(default_factory=Counter)

    @property
    def wrong(self) -> int:
        """Writes lost (or duplicated): the distance between what should and what did happen."""
        return -(-abs(self.expected - self.stored) // self.unit)


def by_cell(outcomes: Iterable[Outcome]) -> dict[tuple[str, str, str], Outcome]:
    """Outcomes keyed by (server, class slug, variant name), as the table and report look them up."""
    return {(o.server, o.class_slug, o.variant): o for o in outcomes}


class Collector:
    """The checker's listener: every violation reported while the demo runs (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.violations: list[Any] = []

    def __call__(self, violation: Any) -> None:
        with self._lock:
            self.violations.append(violation)

    def take(self) -> list[Any]:
        with self._lock:
            taken, self.violations = self.violations, []
        return taken


@contextmanager
def listening() -> Iterator[Collector]:
    collector = Collector()
    txnsafety.add_listener(collector)
    try:
        yield collector
    finally:
        txnsafety.remove_listener(collector)


def post(url: str) -> bool:
    """One client request; True when the handler answered 200."""
    request = urllib.request.Request(url, data=b"", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            response.read()
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def fire(url: str, requests: int, concurrency: int, tick: Callable[[], None]) -> int:
    """``requests`` POSTs to ``url`` from ``concurrency`` threads; returns how many failed.

    The clients are daemon threads that take the requests one at a time.  Interrupted
    (Ctrl-C reaches the main thread here, or ``tick`` raises), no client starts another
    request and the interruption goes on at once, leaving the requests in flight behind:
    a thread pool's workers would be waited for, here and again when the interpreter
    exits, for as long as the server takes to answer them or ``post``'s timeout (two
    minutes) when it never will (a server stopped with a request half served).
    """
    answers: queue.SimpleQueue[bool | Exception] = queue.SimpleQueue()
    tickets = itertools.count()
    stop = threading.Event()

    def client() -> None:
        while not stop.is_set() and next(tickets) < requests:
            try:
                answers.put(post(url))
            except Exception as error:  # raised in the main thread, as a pool's map would
                answers.put(error)
                return

    clients = [threading.Thread(target=client, name=f"txnsafety-demo-client-{number}", daemon=True)
               for number in range(concurrency)]
    for thread in clients:
        thread.start()
    failed = 0
    try:
        for _ in range(requests):
            answer = answers.get()
            if isinstance(answer, Exception):
                raise answer
            failed += not answer
            tick()
    finally:
        stop.set()
    for thread in clients:
        thread.join()
    return failed


def distinct_reports(violations: list[Any], recorder: Recorder, server: str, class_slug: str,
                     variant: str) -> list[dict[str, Any]]:
    """One entry per distinct report (same code and sites), with a count and one race's timeline."""
    groups: dict[tuple[Any, ...], list[Any]] = {}
    for violation in violations:
        groups.setdefault(violation.dedupe_key(), []).append(violation)
    entries = []
    for same in groups.values():
        chosen, lanes = same[0], []
        for violation in same:  # prefer a request whose race shows the erased write
            internal = violation.code is Code.TXN103
            lanes = race(recorder.events, violation.request_id, violation.model, str(violation.key), internal,
                         check_then_act=violation.code is Code.TXN105)
            chosen = violation
            if len(lanes) > 1:
                break
        entry = chosen.as_dict()
        entry.update(server=server, class_slug=class_slug, variant=variant, requests=len(same),
                     timeline=lanes)
        entries.append(entry)
    return entries
