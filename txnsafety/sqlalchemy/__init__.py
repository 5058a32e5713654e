"""txnsafety for SQLAlchemy 2.x.

    from txnsafety.sqlalchemy import instrument
    Session = instrument(sessionmaker(engine))        # or a Session, scoped_session,
                                                     # AsyncSession, async_sessionmaker,
                                                     # Flask-SQLAlchemy's ``db``

See docs/sqlalchemy.md for what each code means in SQLAlchemy terms.
"""
from __future__ import annotations

from .events import instrument, is_instrumented, transaction_of
from .isolation import Verdict, sqlite_transactions, verdict_for
from . import lookups as _lookups, merge as _merge  # noqa: F401  (patches installed with the listeners)
from .refetch import arefetch, refetch, register as _register_refetcher

_register_refetcher()

__all__ = ["Verdict", "arefetch", "instrument", "is_instrumented", "refetch", "sqlite_transactions",
           "transaction_of", "verdict_for"]
