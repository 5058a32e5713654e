"""Which SQLAlchemy releases the integration supports, and the refusal of the others.

The integration hooks SQLAlchemy 2.x's ORM (its statement cache, ``Session.get``'s
loading path, the 2.0 event signatures); it is tested on 2.0 (CI's oldest-ORM job) and
2.1.  On 1.4 ``instrument()`` would install without a word and then judge with hooks
that were never tested there: a checker that is silently wrong is worse than none.
So ``instrument()`` refuses an older SQLAlchemy with an error naming the version found
and the supported range, while the package extra accepts any SQLAlchemy, so that
``pip install 'txnsafety[sqlalchemy]'`` never moves an application to a new major
version of its ORM.
"""
from __future__ import annotations

import re

from ..config import ConfigurationError

#: The oldest SQLAlchemy the integration supports (major, minor).
OLDEST_SUPPORTED = (2, 0)
#: The supported range, as the README and docs/sqlalchemy.md state it.
SUPPORTED_RANGE = "SQLAlchemy 2.0 and 2.1"


def release(version: str) -> tuple[int, int]:
    """``"1.4.54"`` -> ``(1, 4)``; ``"2.1.0b1"`` -> ``(2, 1)``."""
    found = re.match(r"(\d+)\.(\d+)", version)
    if found is None:
        raise ConfigurationError(f"txnsafety: cannot read SQLAlchemy's version {version!r}")
    return int(found.group(1)), int(found.group(2))


def require_supported(version: str | None = None) -> None:
    """Raise :class:`ConfigurationError` unless ``version`` (default: the installed
    SQLAlchemy's) is one the integration supports."""
    if version is None:
        import sqlalchemy
        version = sqlalchemy.__version__
    if release(version) < OLDEST_SUPPORTED:
        raise ConfigurationError(
            f"txnsafety.sqlalchemy supports {SUPPORTED_RANGE}; this is SQLAlchemy {version}. "
            "Upgrade SQLAlchemy (on Flask-SQLAlchemy 2.5, with Flask-SQLAlchemy 3.1) or leave "
            "instrument() out: the rest of txnsafety (middleware, locks, linter) works without it")
