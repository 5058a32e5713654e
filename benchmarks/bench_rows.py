"""Where the checker's per-row cost goes: a 200-row list endpoint, Django and SQLAlchemy.

A read-only list view (one query of 200 rows of a policy-declared model, as JSON)
served through a WSGI handler with no other middleware, so the per-row cost is as
visible as it gets.  Each framework is timed side by side (``_compare.py``, pooled
fresh processes) in the states that split the cost:

* ``bare``     — txnsafety's hooks/listeners removed, no middleware: the baseline;
* ``off``      — hooks installed, middleware in place, ``ENABLED`` false: the idle cost;
* ``checked``  — the checker on (mode ``log``);
* ``sampled``  — checked, with ``SAMPLE_RATE`` 0.1 (``--sample-rate``): a tenth of the
  requests checked, as production may run it;
* ``empty load`` (SQLAlchemy) — no txnsafety at all, one empty ``load`` listener on the
  base class: what SQLAlchemy's own per-row event dispatch costs.

``--loop NAME --calls N`` serves one contender N times untimed, for instruction counts
under valgrind (``docs/performance.md`` gives the commands); ``--list`` names them.

    python benchmarks/bench_rows.py [--rounds 60] [--per-round 3] [--processes 5] [--only django|sqlalchemy]
    python benchmarks/bench_rows.py --postgres URL   # on PostgreSQL, a private database per process
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import bench_django as dj  # noqa: E402  (configures Django: SQLite, txnsafety installed)
from benchmarks import bench_sqlalchemy as sa  # noqa: E402
from benchmarks import _pg  # noqa: E402
from benchmarks._compare import Contender, add_options, compare, serve_untimed, start  # noqa: E402

from django.core.handlers.wsgi import WSGIHandler  # noqa: E402
from django.db import transaction  # noqa: E402
from django.http import JsonResponse  # noqa: E402
from django.test import override_settings  # noqa: E402
from django.urls import path  # noqa: E402
from sqlalchemy import event  # noqa: E402
from sqlalchemy.orm import sessionmaker  # noqa: E402
from webob import Request  # noqa: E402

import txnsafety  # noqa: E402
from fixtures.django_app.models import Account  # noqa: E402

ROWS = 200
FIRST = 1001  # the list's keys: after bench_django's 15 accounts


def django_list(request):
    """The list view: one queryset of ROWS accounts, as JSON, in one atomic block."""
    with transaction.atomic():
        rows = [{"id": a.pk, "owner": a.owner, "balance": a.balance, "note": a.note}
                for a in Account.objects.filter(pk__gte=FIRST).order_by("pk")]
    return JsonResponse({"items": rows})


dj.urlpatterns.append(path("list/", django_list))  # bench_django's module is the URLconf


def _django_data() -> None:
    dj.setup_data()
    Account.objects.bulk_create([Account(pk=pk, owner=f"user{pk}", balance=pk, note="x" * 40)
                                 for pk in range(FIRST, FIRST + ROWS)])


def _wsgi(handler: Callable, url: str) -> Callable[[], None]:
    def request() -> None:
        status, _, body = Request.blank(url).call_application(handler)
        b"".join(body)
        getattr(body, "close", lambda: None)()
        assert status == "200 OK", status
    return request


#: the share of requests the ``sampled`` contenders check (``--sample-rate``)
SAMPLE_RATE = 0.1


def django_contenders(sample_rate: float = SAMPLE_RATE) -> dict[str, Contender]:
    with override_settings(MIDDLEWARE=[]):
        bare = WSGIHandler()
    with override_settings(MIDDLEWARE=[dj.OURS]):
        ours = WSGIHandler()
    return {"django": Contender(_wsgi(bare, "/list/"), dj._state(False, False)),
            "django off": Contender(_wsgi(ours, "/list/"), dj._state(True, False)),
            "django checked": Contender(_wsgi(ours, "/list/"), dj._state(True, True)),
            "django sampled": Contender(_wsgi(ours, "/list/"), dj._state(True, True, sample_rate))}


def _empty_load(state, context) -> None:
    """A load listener that does nothing: SQLAlchemy's own dispatch cost per row."""


def sqlalchemy_contenders(engine, sample_rate: float = SAMPLE_RATE) -> dict[str, Contender]:
    plain, checked = sessionmaker(engine), sa.instrument(sessionmaker(engine))

    def state(listeners: bool, enabled: bool, empty: bool = False, rate: float = 1.0) -> Callable[[], None]:
        def setup() -> None:
            sa._listeners(listeners)()
            txnsafety.settings.enabled = enabled
            txnsafety.settings.sample_rate = rate
            if empty and not event.contains(sa.Base, "load", _empty_load):
                event.listen(sa.Base, "load", _empty_load, propagate=True, raw=True)
            elif not empty and event.contains(sa.Base, "load", _empty_load):
                event.remove(sa.Base, "load", _empty_load)
        return setup

    return {"sqlalchemy": Contender(sa.make_list_request(plain, False), state(False, False)),
            "sqlalchemy empty load": Contender(sa.make_list_request(plain, False), state(False, False, True)),
            "sqlalchemy off": Contender(sa.make_list_request(checked, True), state(True, False)),
            "sqlalchemy checked": Contender(sa.make_list_request(checked, True), state(True, True)),
            "sqlalchemy sampled": Contender(sa.make_list_request(checked, True),
                                            state(True, True, rate=sample_rate))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--per-round", type=int, default=3)
    parser.add_argument("--only", choices=["django", "sqlalchemy"])
    parser.add_argument("--loop", metavar="NAME", help="serve one contender --calls times, untimed (for valgrind)")
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--list", action="store_true", help="name the contenders")
    parser.add_argument("--sample-rate", type=float, default=SAMPLE_RATE,
                        help=f"the share of requests the sampled contenders check (default {SAMPLE_RATE:g})")
    add_options(parser, processes=5)
    _pg.add_option(parser)
    args = parser.parse_args()
    if not args.loop and not args.list:
        start(args)
    no_reports = sa.watch_reports()
    _django_data()
    with tempfile.TemporaryDirectory() as tmp:
        engine = sa.prepared_engine(tmp, args.postgres, rows=20 + ROWS)
        # each contender's child opens its own connections
        os.register_at_fork(before=lambda: (engine.dispose(), dj.connections.close_all()))
        groups = {"django": django_contenders(args.sample_rate),
                  "sqlalchemy": sqlalchemy_contenders(engine, args.sample_rate)}
        if args.list:
            print("\n".join(name for group in groups.values() for name in group))
            return
        if args.loop:
            contender = {name: c for group in groups.values() for name, c in group.items()}[args.loop]
            contender.setup()
            serve_untimed(contender.run, args.calls)
            return
        for name, contenders in groups.items():
            if args.only and args.only != name:
                continue
            result = compare(contenders, baseline=name, rounds=args.rounds, per_round=args.per_round,
                             title=f"{name}: list endpoint, one query of {ROWS} rows, read only (WSGI"
                                   f"{', PostgreSQL' if args.postgres else ''})", verify=no_reports)
            for other in contenders:
                if other != name:
                    print(f"  {other}: {100 * result.overhead(other):+.1f} %, "
                          f"{result.cost_per(other, ROWS) * 1e6:+.2f} us per row")
            print(f"  (the bare request: {result.medians[name] / ROWS * 1e6:.1f} us per row)\n")
        sa._listeners(True)()
        dj._state(True, True)()  # (sample_rate 1.0 again)
        engine.dispose()
    no_reports()


if __name__ == "__main__":
    main()
