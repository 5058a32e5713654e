"""Wire privacyIDEA as txnsafety's README says, without editing its code: strict mode,
``instrument(db)`` once next to the extension, and the middleware outermost at the end of
the application factory (its tests import ``create_app`` from ``privacyidea.app``)."""
import privacyidea.app as app_module

import txnsafety
from privacyidea.models.db import db
from txnsafety.sqlalchemy import instrument
from txnsafety.wsgi import TxnSafetyMiddleware

txnsafety.configure(strict=True)
instrument(db)
_factory = app_module.create_app


def create_app(*args, **kwargs):
    app = _factory(*args, **kwargs)
    app.wsgi_app = TxnSafetyMiddleware(app.wsgi_app)
    return app


app_module.create_app = create_app
