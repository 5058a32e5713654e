"""The checker's cost on the request shapes Django users write (issue 33), SQLite or PostgreSQL.

``bench_shapes.py``'s view, written the Django way, served by Django's own handlers: 11
reads of one ``Account`` by primary key (one of them ``select_for_update()``), a list of
5 rows read ``select_for_update()`` and one of 4, the 5 locked rows modified and
``save()``d, all in one ``transaction.atomic()``, a JSON response.  The shapes
(:data:`SHAPES`):

* ``django-get``          — ``Account.objects.get(pk=pk)`` x 11, WSGI (``WSGIHandler``);
* ``django-filter-first`` — the same reads as a ``filter(pk=pk).first()`` loop, WSGI;
* ``django-list``         — a read-only list of 200 rows (``filter().order_by()``), WSGI;
* ``django-async``        — an ``async def`` view under ``ASGIHandler`` on one event loop:
  the 10 plain reads by ``await aget()``, the 4-row list by ``async for``, then the locked
  part (the FOR UPDATE read, the 5-row list, the 5 saves) in ``transaction.atomic()``
  through ``sync_to_async``, as Django's documentation says to (``atomic`` is not async).

Each shape is timed side by side (``_compare.py``: rotating rounds, a forked child per
contender, pooled fresh processes) in the states of ``bench_shapes.py``:

* ``bare``    — txnsafety's hooks uninstalled, no middleware;
* ``off``     — hooks installed, the middleware in place, ``ENABLED`` false: installed but off;
* ``checked`` — every request checked;
* ``sampled`` — ``SAMPLE_RATE`` 0.1: a tenth of the requests checked.

The async shape's ORM calls run in ``sync_to_async``'s thread: it is timed in the process's
CPU time (both threads), the others in the calling thread's (``_compare.py``).
``--loop SHAPE:STATE --calls N`` serves one contender untimed (``count_instructions.py``);
``--list`` names them.  The requests are safe: a report fails the run.

    python benchmarks/bench_shapes_django.py [--rounds 40] [--processes 5] [--only django-get]
    python benchmarks/bench_shapes_django.py --postgres postgresql://USER:PASSWORD@HOST:5432/DB
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import bench_django as dj  # noqa: E402  (configures Django: SQLite, or --postgres)
from benchmarks._compare import Contender, compare, serve_untimed, start  # noqa: E402
from benchmarks._shape_args import shape_arguments  # noqa: E402

from asgiref.sync import sync_to_async  # noqa: E402
from django.core.handlers.asgi import ASGIHandler  # noqa: E402
from django.core.handlers.wsgi import WSGIHandler  # noqa: E402
from django.db import connections, transaction  # noqa: E402
from django.http import JsonResponse  # noqa: E402
from django.test import override_settings  # noqa: E402
from django.urls import path  # noqa: E402
from webob import Request  # noqa: E402

import txnsafety  # noqa: E402
from fixtures.django_app.models import Account  # noqa: E402

#: The primary keys read one by one; the last is read FOR UPDATE.
KEYS = range(1, 12)
#: The rows of the two lists: the five are locked and written.
FIVE, FOUR = (12, 16), (17, 20)
#: The list endpoint's rows (after the view's 20).
LIST_FIRST, LIST_ROWS = 1001, 200
SAMPLE_RATE = 0.1
STATES = ("bare", "off", "checked", "sampled")


def _json(items: list[Account]) -> JsonResponse:
    return JsonResponse({"items": [{"id": a.pk, "balance": a.balance, "note": a.note} for a in items]})


def _locked_writes(items: list[Account]) -> list[Account]:
    """The five rows read FOR UPDATE, modified and saved: safe on any isolation level."""
    five = list(Account.objects.select_for_update().filter(pk__range=FIVE).order_by("pk"))
    for account in five:
        account.balance += 1
        account.save()
    return items + five


def get_view(request: Any) -> JsonResponse:
    with transaction.atomic():
        items = [Account.objects.get(pk=pk) for pk in KEYS[:-1]]
        items.append(Account.objects.select_for_update().get(pk=KEYS[-1]))
        items += Account.objects.filter(pk__range=FOUR).order_by("pk")
        return _json(_locked_writes(items))


def filter_first_view(request: Any) -> JsonResponse:
    with transaction.atomic():
        items = [Account.objects.filter(pk=pk).first() for pk in KEYS[:-1]]
        items.append(Account.objects.select_for_update().filter(pk=KEYS[-1]).first())
        items += Account.objects.filter(pk__range=FOUR).order_by("pk")
        return _json(_locked_writes(items))


def list_view(request: Any) -> JsonResponse:
    with transaction.atomic():
        return _json(list(Account.objects.filter(pk__gte=LIST_FIRST).order_by("pk")))


def _locked_part(items: list[Account]) -> list[Account]:
    with transaction.atomic():
        items.append(Account.objects.select_for_update().get(pk=KEYS[-1]))
        return _locked_writes(items)


async def async_view(request: Any) -> JsonResponse:
    items = [await Account.objects.aget(pk=pk) for pk in KEYS[:-1]]
    items += [account async for account in Account.objects.filter(pk__range=FOUR).order_by("pk")]
    return _json(await sync_to_async(_locked_part)(items))


dj.urlpatterns += [path("get/", get_view), path("filter-first/", filter_first_view), path("list/", list_view),
                   path("async/", async_view)]   # bench_django's module is the URLconf


def setup_data() -> None:
    dj.setup_data()   # the tables, accounts 1-15
    Account.objects.bulk_create([Account(pk=pk, owner=f"user{pk}", balance=pk, note="x" * 40)
                                 for pk in [*range(16, 21), *range(LIST_FIRST, LIST_FIRST + LIST_ROWS)]])


# -- the apps ------------------------------------------------------------------------------------------

def _wsgi(url: str, checked: bool) -> Callable[[], None]:
    with override_settings(MIDDLEWARE=[dj.OURS] if checked else []):
        handler = WSGIHandler()

    def request() -> None:
        status, _, body = Request.blank(url).call_application(handler)
        b"".join(body)
        getattr(body, "close", lambda: None)()
        assert status == "200 OK", status
    return request


def _asgi(url: str, checked: bool) -> Callable[[], None]:
    with override_settings(MIDDLEWARE=[dj.OURS] if checked else []):
        handler = ASGIHandler()
    scope = {"type": "http", "method": "GET", "path": url, "headers": [], "query_string": b"",
             "server": ("testserver", 80), "client": ("127.0.0.1", 1), "scheme": "http", "asgi": {"version": "3.0"}}
    loops: list[asyncio.AbstractEventLoop] = []   # made in the process that serves (a forked child)

    def request() -> None:
        if not loops:
            loops.append(asyncio.new_event_loop())
        loop = loops[0]
        sent: list[dict[str, Any]] = []
        received: list[bool] = []
        disconnect = loop.create_future()   # the client stays until the response is sent

        async def receive() -> dict[str, Any]:
            if not received:   # the body, then nothing until the handler stops listening
                received.append(True)
                return {"type": "http.request", "body": b"", "more_body": False}
            return await disconnect

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)
        loop.run_until_complete(handler(scope, receive, send))
        disconnect.cancel()
        assert sent[0]["status"] == 200, sent
    return request


@dataclass(frozen=True)
class Shape:
    """One way of writing the view, and how its requests are served."""

    name: str
    title: str
    serve: Callable[[str, bool], Callable[[], None]]
    url: str
    #: The work runs in other threads too (``sync_to_async``): time the process's CPU.
    threads: bool = False


SHAPES = (
    Shape("django-get", "Account.objects.get(pk) x 11 (one FOR UPDATE), 2 lists, 5 saves (WSGI)", _wsgi, "/get/"),
    Shape("django-filter-first", "filter(pk=pk).first() x 11 (one FOR UPDATE), 2 lists, 5 saves (WSGI)",
          _wsgi, "/filter-first/"),
    Shape("django-list", f"a list of {LIST_ROWS} rows, read only (WSGI)", _wsgi, "/list/"),
    Shape("django-async", "async view: aget() x 10, async for, then atomic via sync_to_async (ASGI)", _asgi,
          "/async/", threads=True),
)


def _state(state: str, sample_rate: float) -> Callable[[], None]:
    return {"bare": dj._state(False, False), "off": dj._state(True, False), "checked": dj._state(True, True),
            "sampled": dj._state(True, True, sample_rate)}[state]


def contenders(shape: Shape, sample_rate: float = SAMPLE_RATE) -> dict[str, Contender]:
    bare, checked = shape.serve(shape.url, False), shape.serve(shape.url, True)
    return {state: Contender(bare if state == "bare" else checked, _state(state, sample_rate)) for state in STATES}


def main() -> None:
    args = shape_arguments(__doc__, [shape.name for shape in SHAPES], STATES, SAMPLE_RATE)
    if args is None:
        return
    if not args.loop:
        start(args)
    setup_data()
    os.register_at_fork(before=connections.close_all)  # each contender's child opens its own connection
    violations: list[Any] = []
    txnsafety.add_listener(violations.append)

    def no_reports() -> None:  # run where the contenders ran: the views are safe
        if violations:
            raise SystemExit(f"unexpected violations: {violations}")
    try:
        if args.loop:
            name, state = args.loop.split(":")
            contender = contenders({s.name: s for s in SHAPES}[name], args.sample_rate)[state]
            contender.setup()
            serve_untimed(contender.run, args.calls)
        else:
            _compare_shapes(args, no_reports)
    finally:
        txnsafety.remove_listener(violations.append)
        dj._state(True, True)()
    no_reports()


def _compare_shapes(args: argparse.Namespace, no_reports: Callable[[], None]) -> None:
    where = "PostgreSQL" if args.postgres else "SQLite"
    for shape in SHAPES:
        if args.only and shape.name not in args.only:
            continue
        result = compare(contenders(shape, args.sample_rate), baseline="bare", rounds=args.rounds,
                         per_round=args.per_round, title=f"{shape.name}: {shape.title}, {where}",
                         verify=no_reports, threads=shape.threads)
        print(f"  {shape.name}: checked {100 * result.overhead('checked'):+.1f} %, "
              f"sampled {100 * result.overhead('sampled'):+.1f} %, off {100 * result.overhead('off'):+.1f} %\n",
              flush=True)


if __name__ == "__main__":
    main()
