"""txnsafety beside the tools a Django project already runs on every request.

The request of ``bench_django.py`` (one ``transaction.atomic()`` block, 20 reads,
5 writes, JSON out, Django's WSGI handler behind ``startproject``'s middleware),
served round after round in rotating order by:

* ``django``          — none of them: the baseline;
* ``txnsafety``       — hooks, middleware, checker on (mode ``log``);
* ``django-zeal``     — N+1 detection (``zeal`` patches, ``zeal_middleware``);
* ``nplusone``        — N+1 detection (``nplusone.ext.django`` patches, its middleware);
* ``sentry errors``   — ``sentry_sdk.init`` with the Django integration, errors only;
* ``sentry tracing``  — the same with ``traces_sample_rate=1.0``.

Each peer is switched in and out per round in the same process: what its setup
replaced on Django is captured once (``benchmarks/_switch.py``) and put in place
only for its own turn, so every contender, the baseline too, runs on otherwise
pristine Django.  Sentry's events go to a transport that drops them: the client's
work (spans, serialisation) is timed, the network is not.  The request's 15
``get()`` calls in a loop are what django-zeal reports as an N+1 (it raises by
default); they are on its allowlist, as a project would put them, so every
contender serves the same silent request.  ``sentry_sdk.init`` also imports and patches
the other libraries it finds installed (Flask, httpx, SQLAlchemy, ...): those patches
stay for every contender, none of them is on a Django request's path (``--verbose``
lists what is switched).

The peers come from PyPI at pinned versions.  Run with a Python that lacks them,
the script creates a virtualenv under ``~/.cache/txnsafety-bench-peers`` (sharing
this Python's site-packages, for Django), installs them there with pip, and re-runs
itself in it (``TXNSAFETY_BENCH_PEERS_VENV`` moves it).

    python benchmarks/bench_peers.py [--rounds 100] [--per-round 3] [--processes 5] [--wall]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from importlib import metadata

#: The peers and the versions the README's figures were measured with.
PEERS = {"django-zeal": "2.3.0", "nplusone": "1.0.0", "sentry-sdk": "2.75.0"}
#: What the request itself needs (present already where bench_django.py runs).
BASE = ["django>=4.2", "webob>=1.8", "asgiref>=3.7"]
VENV = os.environ.get("TXNSAFETY_BENCH_PEERS_VENV",
                      os.path.join(os.path.expanduser("~"), ".cache", "txnsafety-bench-peers", "venv"))


def _missing() -> list[str]:
    wanted = []
    for name, version in PEERS.items():
        try:
            if metadata.version(name) == version:
                continue
        except metadata.PackageNotFoundError:
            pass
        wanted.append(f"{name}=={version}")
    return wanted


def ensure_peers() -> None:
    """Return if the pinned peers are importable here; else move to (and fill) the venv: never returns."""
    missing = _missing()
    if not missing:
        return
    python = os.path.join(VENV, "bin", "python")
    if os.path.realpath(sys.prefix) != os.path.realpath(VENV):
        if not os.path.exists(python):
            print(f"creating {VENV} for the peers", flush=True)
            subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", VENV], check=True)
        os.execv(python, [python, os.path.abspath(__file__), *sys.argv[1:]])
    if os.environ.get("TXNSAFETY_BENCH_PEERS_INSTALLED"):
        raise SystemExit(f"{VENV} still lacks {' '.join(missing)}: run {python} -m pip install {' '.join(missing)}")
    print(f"installing into {VENV}: {' '.join(missing)}", flush=True)
    if subprocess.run([python, "-m", "pip", "install", "-q", *missing, *BASE]).returncode != 0:
        raise SystemExit(f"could not install the peers; run: {python} -m pip install {' '.join(missing)} "
                         f"{' '.join(BASE)}")
    os.environ["TXNSAFETY_BENCH_PEERS_INSTALLED"] = "1"
    os.execv(python, [python, os.path.abspath(__file__), *sys.argv[1:]])


if __name__ == "__main__":
    ensure_peers()

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# bench_django configures Django (SQLite, txnsafety installed) and builds the request
from benchmarks import bench_django as request_app  # noqa: E402
from benchmarks._compare import Contender, add_options, compare, start  # noqa: E402
from benchmarks._switch import PatchSet, capture  # noqa: E402

from django.conf import settings  # noqa: E402
from django.core.handlers.wsgi import WSGIHandler  # noqa: E402
from django.db import connections  # noqa: E402
from django.test import override_settings  # noqa: E402
from webob import Request  # noqa: E402

import txnsafety  # noqa: E402

# the modules the peers' setups touch, imported before capturing (see _switch.py)
import django.contrib.contenttypes.fields  # noqa: E402,F401
import django.db.models.fields.related_descriptors  # noqa: E402,F401
import django.core.handlers.asgi  # noqa: E402,F401
import django.template.response  # noqa: E402,F401
import django.views.generic.base  # noqa: E402,F401
import sentry_sdk  # noqa: E402
from sentry_sdk.integrations.django import DjangoIntegration  # noqa: E402
from sentry_sdk.transport import Transport  # noqa: E402


class DroppingTransport(Transport):
    """Sentry's envelopes, serialised by the client as usual, then dropped (no network)."""

    def __init__(self, options=None):
        super().__init__(options)
        self.envelopes = 0

    def capture_envelope(self, envelope) -> None:
        self.envelopes += 1


def _zeal_setup() -> None:
    from zeal.constants import initialize_app_registry
    from zeal.patch import patch
    initialize_app_registry()   # what zeal's AppConfig.ready() does
    patch()


def _nplusone_setup() -> None:
    import nplusone.ext.django  # noqa: F401  (its import patches Django, as INSTALLED_APPS does)


def _sentry_client(tracing: bool, transport: DroppingTransport):
    sentry_sdk.init(dsn="http://public@127.0.0.1:9/1", transport=transport, integrations=[DjangoIntegration()],
                    traces_sample_rate=1.0 if tracing else None)
    return sentry_sdk.get_client()


def make_contenders(verbose: bool) -> tuple[dict[str, Contender], dict[str, DroppingTransport]]:
    """name -> the request through its own handler, and the setup that switches the others out."""
    request_app._state(False, False)()   # txnsafety out: what the peers capture is pristine Django
    settings.ZEAL_ALLOWLIST = [{"model": "django_app.Account", "field": "get()"},
                               {"model": "django_app.Counter", "field": "get()"}]
    transports = {"sentry errors": DroppingTransport(), "sentry tracing": DroppingTransport()}
    clients = {}

    def sentry_setup() -> None:
        clients["sentry errors"] = _sentry_client(False, transports["sentry errors"])
        clients["sentry tracing"] = _sentry_client(True, transports["sentry tracing"])
        sentry_sdk.get_global_scope().set_client(None)

    patches: dict[str, PatchSet] = {"django-zeal": capture(_zeal_setup), "nplusone": capture(_nplusone_setup)}
    patches["sentry"] = capture(sentry_setup)
    if verbose:
        for name, patch_set in patches.items():
            print(f"{name} replaces: {', '.join(sorted(map(str, patch_set.changes)))}")
            print(f"{name} imported: {', '.join(patch_set.new_modules)}\n")

    def switch(peer: str | None, client=None, txnsafety_on: bool = False):
        def setup() -> None:
            request_app._state(False, False)()
            for patch_set in patches.values():
                patch_set.revert()
            if peer:
                patches[peer].apply()
            sentry_sdk.get_global_scope().set_client(client)
            if txnsafety_on:
                request_app._state(True, True)()
        return setup

    def traced() -> None:  # in the tracing contender's process, once its rounds are done
        if not transports["sentry tracing"].envelopes:
            raise SystemExit("sentry tracing sent no transaction: the contender did not trace")

    def served(setup, middleware: list[str], verify=None) -> Contender:
        setup()   # the handler loads its middleware with the contender's patches in place
        with override_settings(MIDDLEWARE=[*middleware, *request_app.DEFAULT_STACK]):
            handler = WSGIHandler()

        def request() -> None:
            status, _, body = Request.blank("/cart/?n=1").call_application(handler)
            b"".join(body)
            assert status == "200 OK", status
        return Contender(request, setup, verify)

    contenders = {
        "django": served(switch(None), []),
        "txnsafety": served(switch(None, txnsafety_on=True), [request_app.OURS]),
        "django-zeal": served(switch("django-zeal"), ["zeal.middleware.zeal_middleware"]),
        "nplusone": served(switch("nplusone"), ["nplusone.ext.django.NPlusOneMiddleware"]),
        "sentry errors": served(switch("sentry", clients["sentry errors"]), []),
        "sentry tracing": served(switch("sentry", clients["sentry tracing"]), [], traced),
    }
    return contenders, transports


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--per-round", type=int, default=3)
    parser.add_argument("--verbose", action="store_true", help="list what each peer's setup replaced")
    add_options(parser, processes=5)
    args = parser.parse_args()
    start(args)
    if not args.worker_out:
        print("peers: " + ", ".join(f"{name} {metadata.version(name)}" for name in PEERS))
    request_app.setup_data()
    os.register_at_fork(before=connections.close_all)  # each contender's child opens its own connection
    violations: list = []
    txnsafety.add_listener(violations.append)

    def no_reports() -> None:  # run where the contenders ran (a forked child each, by default)
        if violations:
            raise SystemExit(f"unexpected violations: {violations}")
    contenders, transports = make_contenders(args.verbose)
    result = compare(contenders, baseline="django", rounds=args.rounds, per_round=args.per_round,
                     title="Django WSGI request, startproject's middleware: 20 reads + 5 writes in one SQLite "
                           "transaction", verify=no_reports)
    print()
    for name in contenders:
        if name != "django":
            mid, low, high = result.ratios[name]
            print(f"{name:<16}{100 * (mid - 1):+7.1f} %   ({result.interval_label()} {100 * (low - 1):+.1f} to "
                  f"{100 * (high - 1):+.1f} %)")
    txnsafety.remove_listener(violations.append)


if __name__ == "__main__":
    main()
