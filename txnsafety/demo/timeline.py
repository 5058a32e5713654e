"""Record every read and write of the lab's rows, per request, to draw a report's race.

A runtime report says *that* a write may erase another; the timeline shows
*how*: the reported request's reads and writes of the row next to those of the
request whose write it erased (or, for an internal stomp, the two copies inside
one request).  Events come from SQLAlchemy's own ORM events and the lock
service's metrics hook; they carry times, request ids and code sites, never
field values.
"""
from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterable

from sqlalchemy import event, inspect as sa_inspect

import txnsafety
from txnsafety.checker import model_name
from txnsafety.locks import add_metrics_hook, remove_metrics_hook


@dataclass(frozen=True)
class Event:
    t_ns: int
    request_id: str
    op: str               # read, write, begin, begin-deferred, commit, rollback, lock, unlock
    model: str            # "" for transaction and lock events
    key: str
    copy: int             # which Python object (id), 0 when not about a row
    site: str             # "endpoints.py:42 in earn_points_racy"


class Recorder:
    """Collects :class:`Event` from the ORM events of ``base``'s models and from ``sessionmakers``."""

    def __init__(self, base: Any, sessionmakers: Iterable[Any], source_file: str) -> None:
        self._base = base
        self._sessionmakers = list(sessionmakers)
        self._source_file = source_file
        self._lock = threading.Lock()
        self.events: list[Event] = []
        self._listeners: list[tuple[Any, str, Any]] = []

    # -- wiring --------------------------------------------------------------

    def __enter__(self) -> "Recorder":
        self._listen(self._base, "load", lambda target, context: self._row("read", target), propagate=True)
        self._listen(self._base, "refresh", lambda target, context, attrs: self._row("read", target),
                     propagate=True)
        for name in ("after_update", "after_insert"):
            self._listen(self._base, name, lambda mapper, connection, target: self._row("write", target),
                         propagate=True)
        for maker in self._sessionmakers:
            self._listen(maker, "after_begin", self._begin)
            self._listen(maker, "after_commit", lambda session: self._plain("commit", session))
            self._listen(maker, "after_rollback", lambda session: self._plain("rollback", session))
        add_metrics_hook(self._lock_event)
        return self

    def __exit__(self, *exc: Any) -> None:
        remove_metrics_hook(self._lock_event)
        for target, name, fn in self._listeners:
            event.remove(target, name, fn)
        self._listeners.clear()

    def _listen(self, target: Any, name: str, fn: Any, **kw: Any) -> None:
        event.listen(target, name, fn, **kw)
        self._listeners.append((target, name, fn))

    def clear(self) -> None:
        with self._lock:
            self.events.clear()

    # -- events ----------------------------------------------------------------

    def _add(self, op: str, model: str = "", key: str = "", copy: int = 0) -> None:
        scope = txnsafety.current_scope()
        if scope is None:
            return
        item = Event(time.perf_counter_ns(), scope.id, op, model, key, copy, self._site())
        with self._lock:
            self.events.append(item)

    def _row(self, op: str, target: Any) -> None:
        identity = sa_inspect(target).identity
        key = ",".join(str(part) for part in identity) if identity else ""
        self._add(op, model_name(type(target)), key, id(target))  # named as the checker names it

    def _begin(self, session: Any, transaction: Any, connection: Any) -> None:
        # The execution options, not get_isolation_level(): that one asks the server.
        if connection.get_execution_options().get("isolation_level") == "AUTOCOMMIT":
            return
        self._add("begin-deferred" if _sqlite_defers_begin(connection) else "begin")

    def _plain(self, op: str, session: Any) -> None:
        self._add(op)

    def _lock_event(self, name: str, **fields: Any) -> None:
        if name in ("acquired", "released"):
            self._add("lock" if name == "acquired" else "unlock", "lock", str(fields.get("key", "")))

    def _site(self) -> str:
        frame = sys._getframe(2)
        while frame is not None:
            if frame.f_code.co_filename == self._source_file:
                name = self._source_file.rsplit("/", 1)[-1]
                return f"{name}:{frame.f_lineno} in {frame.f_code.co_name}"
            frame = frame.f_back
        return ""


def _sqlite_defers_begin(connection: Any) -> bool:
    """The sqlite3 driver's legacy mode: SQLAlchemy began, but BEGIN waits for the first write."""
    if connection.dialect.name != "sqlite":
        return False
    driver_connection = getattr(connection.connection, "driver_connection", None)
    return getattr(driver_connection, "isolation_level", None) is not None


def race(events: list[Event], request_id: str, model: str, key: str, internal: bool,
         check_then_act: bool = False) -> list[dict[str, Any]]:
    """The lanes that explain one report: who read and wrote ``model``/``key`` when.

    For an internal stomp, one lane per Python object of the reported request.
    Otherwise the reported request's lane and that of the first other request
    that wrote the row between the reported request's first read and its last
    write (the write that was erased).  Each lane keeps its request's
    transaction and lock events too, so the picture shows what protected what.
    """
    def about_row(e: Event) -> bool:
        return e.model == model and e.key == key

    mine = [e for e in events if e.request_id == request_id]
    if check_then_act:
        return _check_then_act_race(events, request_id, mine, model)
    row_events = [e for e in mine if about_row(e)]
    if not row_events:
        return []
    if internal:
        copies: list[int] = []
        for e in row_events:
            if e.copy not in copies:
                copies.append(e.copy)
        # The request's own transaction and lock events are drawn once, on the first lane.
        return [_lane(f"copy {i + 1} of the row (same request)", request_id,
                      [e for e in mine if e.copy == copy or (i == 0 and not about_row(e))])
                for i, copy in enumerate(copies)]
    writes = [e for e in row_events if e.op == "write"]
    start, end = row_events[0].t_ns, (writes or row_events)[-1].t_ns
    lanes = [_lane("reported request", request_id, mine)]  # the one whose write erased
    for e in events:
        if e.request_id != request_id and about_row(e) and e.op == "write" and start <= e.t_ns <= end:
            lanes.append(_lane("request whose write it erased", e.request_id,
                               [o for o in events if o.request_id == e.request_id]))
            break
    return lanes


def _check_then_act_race(events: list[Event], request_id: str, mine: list[Event],
                         model: str) -> list[dict[str, Any]]:
    """A check-then-act (TXN105): the reported request, from its start to its insert into
    ``model``, and the first other request whose insert into ``model`` was not yet committed
    when the reported one started (the check cannot see a row by key: the new row has none
    until it is written).  An insert flushed just before this request began, and committed
    after its check, raced it as much as one made during it: the check could not see it."""
    inserts = [e for e in mine if e.model == model and e.op == "write"]
    if not inserts:
        return []
    start, end = mine[0].t_ns, inserts[-1].t_ns
    lanes = [_lane("reported request", request_id, mine)]
    for e in events:
        if e.request_id != request_id and e.model == model and e.op == "write" and e.t_ns <= end and \
                _committed_at(events, e) >= start:
            lanes.append(_lane("request that passed the same check", e.request_id,
                               [o for o in events if o.request_id == e.request_id]))
            break
    return lanes


def _committed_at(events: list[Event], write: Event) -> float:
    """When the transaction of ``write`` committed: its request's first commit after it (no
    commit recorded: never, as far as the picture knows)."""
    return next((e.t_ns for e in events if e.request_id == write.request_id and e.op == "commit"
                 and e.t_ns >= write.t_ns), float("inf"))


def _lane(label: str, request_id: str, events: list[Event]) -> dict[str, Any]:
    return {"label": label, "request_id": request_id,
            "events": [{"t_ns": e.t_ns, "op": e.op, "what": f"{e.model.rsplit('.', 1)[-1]} {e.key}" if e.model else "",
                        "site": e.site} for e in events]}
