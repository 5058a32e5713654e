"""Fixtures of the lock-service tests: one URL per backend, on the real servers.

Every test gets keys of its own (``key`` fixture) and Redis gets a prefix per
session, so tests never see each other's locks.
"""
from __future__ import annotations

import uuid
from typing import Iterator

import pytest

from txnsafety.locks import close_backends, get_backend

BACKENDS = ["memory", "redis", "memcached", "postgresql", "postgresql-xact"]
SESSION = uuid.uuid4().hex[:8]


def backend_url(name: str, request: pytest.FixtureRequest) -> str:
    if name == "memory":
        return "memory://"
    if name == "redis":
        base = request.getfixturevalue("redis_url")
        sep = "&" if "?" in base else "?"
        return f"{base}{sep}prefix=t{SESSION}&recheck=0.5"
    if name == "memcached":
        base = request.getfixturevalue("memcached_url")
        sep = "&" if "?" in base else "?"
        return f"{base}{sep}prefix=t{SESSION}"
    if name == "postgresql":
        return request.getfixturevalue("postgres_url")
    if name == "postgresql-xact":
        base = request.getfixturevalue("postgres_url")
        sep = "&" if "?" in base else "?"
        return f"{base}{sep}scope=transaction"
    raise AssertionError(name)


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest) -> str:
    """Each backend in turn."""
    return backend_url(request.param, request)


@pytest.fixture(params=[b for b in BACKENDS if b != "memory"])
def server_url(request: pytest.FixtureRequest) -> str:
    """Each backend that works across processes."""
    return backend_url(request.param, request)


@pytest.fixture
def key() -> str:
    return f"k-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session", autouse=True)
def _close_backends() -> Iterator[None]:
    yield
    close_backends()


@pytest.fixture
def backend(url: str):  # noqa: ANN201
    return get_backend(url)
