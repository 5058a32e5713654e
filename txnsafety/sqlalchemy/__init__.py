"""txnsafety for SQLAlchemy 2.0 and 2.1 (``instrument()`` refuses an older release).

    from txnsafety.sqlalchemy import instrument
    Session = instrument(sessionmaker(engine))        # or a Session, scoped_session,
                                                     # AsyncSession, async_sessionmaker,
                                                     # Flask-SQLAlchemy's ``db``

See docs/sqlalchemy.md for what each code means in SQLAlchemy terms.
"""
from __future__ import annotations

import functools
from typing import Any

from .events import instrument as _instrument, is_instrumented, transaction_of
from .isolation import Verdict, sqlite_transactions, verdict_for
from . import lookups as _lookups, merge as _merge  # noqa: F401  (patches installed with the listeners)
from .refetch import arefetch, refetch, register as _register_refetcher
from .versions import SUPPORTED_RANGE, require_supported

_register_refetcher()


@functools.wraps(_instrument)
def instrument(target: Any) -> Any:
    require_supported()  # before anything is installed: an older SQLAlchemy is refused whole
    return _instrument(target)


__all__ = ["SUPPORTED_RANGE", "Verdict", "arefetch", "instrument", "is_instrumented", "refetch", "sqlite_transactions",
           "transaction_of", "verdict_for"]
