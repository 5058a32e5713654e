"""Wire ihatemoney as txnsafety's README says, without editing its code: the two lines
at the end of its application factory (instrument(db) once; the middleware outermost)."""
import ihatemoney.run as run

import txnsafety
from txnsafety.sqlalchemy import instrument
from txnsafety.wsgi import TxnSafetyMiddleware

txnsafety.configure(strict=True)
instrument(run.db)
_factory = run.create_app


def create_app(*args, **kwargs):
    app = _factory(*args, **kwargs)
    app.wsgi_app = TxnSafetyMiddleware(app.wsgi_app)
    return app


run.create_app = create_app
