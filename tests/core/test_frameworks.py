"""The README's wrapping recipes, for real: Flask (WSGI) and Starlette/FastAPI (ASGI ``add_middleware``).

Each app serves the points app's racy and fixed handlers (``fixtures/wsgi_asgi/points.py``)
under a real server; the racy one is reported in its own request's scope, the
fixed one is not.
"""
from __future__ import annotations

import pytest

from fixtures.http_servers import asgi_server, get_json, wsgi_server
from fixtures.minidb import value_of
from fixtures.wsgi_asgi import points


@pytest.fixture
def store(tmp_path):
    s = points.make_store(str(tmp_path / "points.sqlite3"))
    yield s
    s.close()


def _check(base, store, txnsafety_violations):
    status, racy = get_json(f"{base}/racy/add?n=2")
    assert status == 200 and racy["violations"] == ["TXN102"]
    assert [v.request_id for v in txnsafety_violations] == [racy["request_id"]]
    status, fixed = get_json(f"{base}/fixed/add?n=3")
    assert status == 200 and fixed["violations"] == [] and fixed["request_id"] != racy["request_id"]
    assert txnsafety_violations.codes() == ["TXN102"]
    assert value_of(store, points.Wallet, 1, "points") == 5


def test_flask_app_wsgi_app_wrapped(store, txnsafety_violations):
    flask = pytest.importorskip("flask")
    from txnsafety.wsgi import TxnSafetyMiddleware

    app = flask.Flask(__name__)

    @app.get("/racy/add")
    def racy():
        points.racy_add(store, int(flask.request.args["n"]))
        return points._own_report()

    @app.get("/fixed/add")
    def fixed():
        points.fixed_add(store, int(flask.request.args["n"]))
        return points._own_report()

    app.wsgi_app = TxnSafetyMiddleware(app.wsgi_app)      # the README's Flask line
    with wsgi_server(app) as base:
        _check(base, store, txnsafety_violations)


def test_starlette_add_middleware(store, txnsafety_violations):
    """FastAPI is Starlette: ``app.add_middleware(TxnSafetyASGIMiddleware)`` is the same call."""
    pytest.importorskip("starlette")
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from txnsafety.asgi import TxnSafetyASGIMiddleware

    def racy(request):  # a sync endpoint: Starlette runs it in its thread pool
        points.racy_add(store, int(request.query_params["n"]))
        return JSONResponse(points._own_report())

    def fixed(request):
        points.fixed_add(store, int(request.query_params["n"]))
        return JSONResponse(points._own_report())

    app = Starlette(routes=[Route("/racy/add", racy), Route("/fixed/add", fixed)])
    app.add_middleware(TxnSafetyASGIMiddleware)             # the README's FastAPI/Starlette line
    with asgi_server(app) as base:
        _check(base, store, txnsafety_violations)
