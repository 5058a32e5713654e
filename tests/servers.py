"""Where the real test servers are, and what to do when one is missing.

`.ci/servers` starts PostgreSQL, Redis, memcached and MariaDB on 127.0.0.1.  A test that
needs one asks for the matching fixture in ``tests/conftest.py``.  When the server
does not answer, the test is skipped on a developer machine and **fails** under
``CI=true``: a missing server must never pass as a skip in CI.
"""
from __future__ import annotations

import os
import socket
from urllib.parse import urlsplit

import pytest

POSTGRES_URL = os.environ.get(
    "TXNSAFETY_TEST_POSTGRES_URL", "postgresql://txnsafety:txnsafety@127.0.0.1:5432/txnsafety")
REDIS_URL = os.environ.get("TXNSAFETY_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
MEMCACHED_URL = os.environ.get("TXNSAFETY_TEST_MEMCACHED_URL", "memcached://127.0.0.1:11211")
#: MariaDB (or MySQL); the user may create databases (each suite makes its own).
MYSQL_URL = os.environ.get("TXNSAFETY_TEST_MYSQL_URL", "mysql://txnsafety:txnsafety@127.0.0.1:3306/txnsafety")

_answers: dict[str, bool] = {}


def answers(url: str) -> bool:
    """True when something accepts a TCP connection at the URL's host and port."""
    if url not in _answers:
        parts = urlsplit(url)
        try:
            with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 0), timeout=1):
                _answers[url] = True
        except OSError:
            _answers[url] = False
    return _answers[url]


def require(url: str, what: str) -> str:
    """Return ``url`` if its server answers; else skip (locally) or fail (CI)."""
    if answers(url):
        return url
    missing(f"{what} is not answering at {url}; start it with `bash .ci/servers`")


def missing(message: str) -> None:
    """Something a test needs is absent: skip on a developer machine, fail under CI."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)
