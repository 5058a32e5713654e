"""Runtime checker overhead on a realistic Django request (SQLite, or PostgreSQL with ``--postgres``).

The view: one ``transaction.atomic()`` block, 20 reads (``get()`` by primary key,
five of them ``select_for_update()``) and 5 whole-row ``save()`` writes of
policy-declared models, then a JSON response — served by Django's real WSGI
handler.  The contenders run side by side in one process, alternating order
round after round so drift hits all alike:

* ``django``    — txnsafety not installed at all: no hooks, no middleware;
* ``installed, off`` — hooks and middleware installed, ``TXNSAFETY["ENABLED"] = False``;
* ``checked``   — hooks, middleware, checker on (mode ``log``);
* ``checked, sampled`` — the same with ``SAMPLE_RATE`` (``--sample-rate``, 0.1 by
  default): the checker checks that share of the requests, as production may run it;
* ``checked, sampler`` — the same share decided by a ``SAMPLER`` (a function of the
  method, path and headers, as production may run it per endpoint): against
  ``checked, sampled``, what a sampler costs (one call a request, and the headers it
  reads, through ``txnsafety/request_headers.py``'s lazy mapping).

The ratio ``checked / django`` is the overhead (target, DESIGN.md: within 5 %).
A second table times the ORM work alone (no HTTP), the worst case for the ratio.

    python benchmarks/bench_django.py [--rounds 100] [--per-round 3] [--sample-rate 0.1] [--wall] [--postgres URL]
    python benchmarks/bench_django.py --loop checked --calls 120   # untimed, for cachegrind

``--postgres URL``: the same on PostgreSQL (read committed, Django's default: the
counters are locked with ``select_for_update()``), in a private database per process
(``benchmarks/_pg.py``).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_TMP = tempfile.mkdtemp(prefix="txnsafety-bench-django-")


def _configure() -> None:
    import django
    from django.conf import settings

    from benchmarks import _pg
    from fixtures.django_app.settings import build, database_from_url
    if settings.configured:  # imported again as the URLconf (the script itself is __main__)
        return
    conf = build(os.path.join(_TMP, "bench.sqlite3"), ROOT_URLCONF="benchmarks.bench_django",
                 TXNSAFETY={"MODE": "log", "ENABLED": True})
    postgres = _pg.url_from_argv()
    if postgres:
        conf["DATABASES"]["default"] = database_from_url(_pg.private_database(postgres))
    conf["INSTALLED_APPS"] = ["django.contrib.contenttypes", "django.contrib.auth", "django.contrib.sessions",
                              "django.contrib.messages", *conf["INSTALLED_APPS"]]
    settings.configure(**conf)
    settings.DATABASES["default"]["CONN_MAX_AGE"] = None   # persistent, as in production
    django.setup()

    from django.db.backends.signals import connection_created

    def fast_sqlite(sender, connection, **kwargs):  # WAL without fsync per commit: time CPU, not disk
        if connection.vendor != "sqlite":
            return
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")

    connection_created.connect(fast_sqlite, weak=False)


_configure()

from django.core.handlers.wsgi import WSGIHandler  # noqa: E402
from django.db import connection, connections, transaction  # noqa: E402
from django.http import JsonResponse  # noqa: E402
from django.test import override_settings  # noqa: E402
from django.urls import path  # noqa: E402
from webob import Request  # noqa: E402

import txnsafety  # noqa: E402
from fixtures.django_app.models import Account, Counter  # noqa: E402
from txnsafety.django import hooks  # noqa: E402
from benchmarks import _pg  # noqa: E402
from benchmarks._compare import Contender, add_options, compare, serve_untimed, start  # noqa: E402

#: ``django-admin startproject``'s MIDDLEWARE: what a real project runs on every request.
DEFAULT_STACK = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
OURS = "txnsafety.django.middleware.TxnSafetyMiddleware"

N_ACCOUNTS = 15
N_COUNTERS = 5


def cart_work(amount: int) -> dict:
    """20 reads, 5 writes, one transaction."""
    with transaction.atomic():
        accounts = [Account.objects.get(pk=pk) for pk in range(1, N_ACCOUNTS + 1)]
        counters = [Counter.objects.select_for_update().get(pk=pk) for pk in range(1, N_COUNTERS + 1)]
        for counter in counters:
            counter.value += amount
            counter.save()
    return {"balance": sum(a.balance for a in accounts), "counters": [c.value for c in counters]}


def cart_view(request):
    return JsonResponse(cart_work(int(request.GET.get("n", "1"))))


urlpatterns = [path("cart/", cart_view)]


def setup_data() -> None:
    from fixtures.django_app.models import ALL_MODELS
    with connection.schema_editor() as editor:
        for model in ALL_MODELS:
            editor.create_model(model)
    Account.objects.bulk_create([Account(pk=pk, owner=f"user{pk}", balance=pk)
                                 for pk in range(1, N_ACCOUNTS + 1)])
    Counter.objects.bulk_create([Counter(pk=pk, value=0) for pk in range(1, N_COUNTERS + 1)])


def _state(installed: bool, enabled: bool, sample_rate: float = 1.0,
           sampler: Callable[..., float] | None = None) -> Callable[[], None]:
    def apply() -> None:
        if installed:
            hooks.install()
        else:
            hooks.uninstall()
        txnsafety.settings.enabled = enabled
        txnsafety.settings.sample_rate = sample_rate
        txnsafety.settings.sampler = sampler
    return apply


#: the contender that checks a share of the requests (``SAMPLE_RATE``), as production may
SAMPLED = "checked, sampled"
#: the same share, decided per request by a ``SAMPLER``
SAMPLER = "checked, sampler"


def _sampler(rate: float) -> Callable[..., float]:
    """A sampler as a project writes one: a hot path sampled at ``rate``, anything else checked."""
    def sampler(method: str, path: str, headers: object) -> float:
        return rate if path.startswith("/cart/") else 1.0
    return sampler


def make_contenders(http: bool, stack: list[str] | None = None,
                    sample_rate: float = 0.1) -> dict[str, Contender]:
    """name -> the request, and the setup that switches txnsafety to that contender."""
    stack = stack or []
    with override_settings(MIDDLEWARE=stack):
        bare = WSGIHandler()
    with override_settings(MIDDLEWARE=[OURS, *stack]):
        checked = WSGIHandler()

    def wsgi(handler: WSGIHandler) -> Callable[[], None]:
        def request() -> None:
            status, _, body = Request.blank("/cart/?n=1").call_application(handler)
            b"".join(body)
            assert status == "200 OK", status
        return request

    def orm(scoped: bool) -> Callable[[], None]:
        def request() -> None:
            if not scoped:
                cart_work(1)
                return
            with txnsafety.request_scope("GET /cart/"):
                cart_work(1)
        return request

    if http:
        return {
            "django": Contender(wsgi(bare), _state(False, False)),
            "installed, off": Contender(wsgi(checked), _state(True, False)),
            "checked": Contender(wsgi(checked), _state(True, True)),
            SAMPLED: Contender(wsgi(checked), _state(True, True, sample_rate)),
            SAMPLER: Contender(wsgi(checked), _state(True, True, 1.0, _sampler(sample_rate))),
        }
    return {
        "django": Contender(orm(False), _state(False, False)),
        "installed, off": Contender(orm(False), _state(True, False)),
        "checked": Contender(orm(True), _state(True, True)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--per-round", type=int, default=3)
    parser.add_argument("--sample-rate", type=float, default=0.1,
                        help="the share of requests the sampled contender checks (default 0.1)")
    parser.add_argument("--loop", metavar="NAME",
                        help="serve one contender of the WSGI request (no other middleware) --calls times, untimed "
                             "(instruction counts: benchmarks/count_instructions.py)")
    parser.add_argument("--calls", type=int, default=100)
    add_options(parser, processes=5)
    _pg.add_option(parser)
    args = parser.parse_args()
    if args.loop:
        setup_data()
        contender = make_contenders(http=True, stack=[])[args.loop]
        contender.setup()
        serve_untimed(contender.run, args.calls)
        return
    start(args)
    setup_data()
    os.register_at_fork(before=connections.close_all)  # each contender's child opens its own connection
    where = "PostgreSQL" if args.postgres else "SQLite"
    violations: list = []
    txnsafety.add_listener(violations.append)

    def no_reports() -> None:  # run where the contenders ran (a forked child each, by default)
        if violations:  # the benchmark's view is safe: a report would mean a false positive
            raise SystemExit(f"unexpected violations: {violations}")
    try:
        for stack, label in (([], "no other middleware (worst case)"),
                             (DEFAULT_STACK, "startproject's default middleware")):
            request = compare(make_contenders(http=True, stack=stack, sample_rate=args.sample_rate),
                              baseline="django", rounds=args.rounds,
                              per_round=args.per_round,
                              title=f"Django WSGI request, {label}:\n"
                                    f"  20 reads + 5 writes in one {where} transaction", verify=no_reports)
            print(request.summary("checked"))
            print(f"checking {args.sample_rate:g} of the requests (SAMPLE_RATE): "
                  f"{100 * request.overhead(SAMPLED):+.1f} %; the same share decided by a SAMPLER: "
                  f"{100 * request.overhead(SAMPLER):+.1f} %")
            print(f"installed but switched off: {100 * request.overhead('installed, off'):+.1f} %\n")
        bare = compare(make_contenders(http=False), baseline="django", rounds=args.rounds,
                       per_round=args.per_round,
                       title="ORM work alone (no HTTP): 20 reads + 5 writes, the worst case", verify=no_reports)
        print(bare.summary("checked"))
        print(f"checker cost per read/write: {bare.cost_per('checked', 25) * 1e6:.2f} us")
    finally:
        txnsafety.remove_listener(violations.append)
        hooks.install()
        txnsafety.settings.enabled = True
        txnsafety.settings.sampler = None
    no_reports()


if __name__ == "__main__":
    main()
