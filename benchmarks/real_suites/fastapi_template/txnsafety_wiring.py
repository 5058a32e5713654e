"""Wire the full-stack FastAPI template's backend as txnsafety's README says, without
editing its code: strict mode, its SQLModel ``Session`` class instrumented once, and the
ASGI middleware added to the app (outermost: ``add_middleware`` puts it before CORS)."""
import sqlmodel

import txnsafety
from txnsafety.asgi import TxnSafetyASGIMiddleware
from txnsafety.sqlalchemy import instrument

txnsafety.configure(strict=True)
instrument(sqlmodel.Session)

import app.main  # noqa: E402  (after instrument(): the app's engine and Sessions come from it)

app.main.app.add_middleware(TxnSafetyASGIMiddleware)
