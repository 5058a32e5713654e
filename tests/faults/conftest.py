"""Fixtures of the fault suite: its own servers, a fault-injecting proxy."""
from __future__ import annotations

import uuid
from pathlib import Path
from typing import Iterator
from urllib.parse import urlsplit

import pytest

from tests.faults.proxy import FaultProxy
from tests.locks.conftest import SESSION
from tests.faults.servers import OwnMemcached, OwnRedis, OwnServer
from txnsafety.locks import close_backends


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    server = OwnRedis(tmp_path).start()
    yield server
    server.stop()


@pytest.fixture
def own_memcached(tmp_path: Path) -> Iterator[OwnMemcached]:
    server = OwnMemcached(tmp_path).start()
    yield server
    server.stop()


@pytest.fixture(params=["redis", "memcached"])
def own_server(request: pytest.FixtureRequest) -> OwnServer:
    """Each server that can lose all its state on a restart."""
    return request.getfixturevalue(f"own_{request.param}")


@pytest.fixture
def make_proxy() -> Iterator:
    made: list[FaultProxy] = []

    def make(host: str, port: int) -> FaultProxy:
        proxy = FaultProxy(host, port)
        made.append(proxy)
        return proxy
    yield make
    for proxy in made:
        proxy.close()


@pytest.fixture(autouse=True)
def _close_backends() -> Iterator[None]:
    yield
    close_backends()


@pytest.fixture
def key() -> str:
    return f"fault-{uuid.uuid4().hex[:12]}"


def through(proxy: FaultProxy, url: str) -> str:
    """``url`` with its host and port replaced by the proxy's (credentials and query kept)."""
    parts = urlsplit(url)
    cred = parts.netloc.rpartition("@")[0]
    return parts._replace(netloc=f"{cred + '@' if cred else ''}127.0.0.1:{proxy.port}").geturl()


SHARED = ["redis", "memcached", "postgresql", "postgresql-xact"]


@pytest.fixture(params=SHARED)
def shared(request: pytest.FixtureRequest, make_proxy) -> tuple[str, str, FaultProxy]:  # noqa: ANN001
    """(kind, direct URL, proxy to it) for each shared server backend (proxy faults only)."""
    kind = request.param
    base = request.getfixturevalue({"redis": "redis_url", "memcached": "memcached_url"}.get(
        kind, "postgres_url"))
    sep = "&" if "?" in base else "?"
    url = {"redis": f"{base}{sep}prefix=f{SESSION}", "memcached": f"{base}{sep}prefix=f{SESSION}",
           "postgresql": base, "postgresql-xact": f"{base}{sep}scope=transaction"}[kind]
    parts = urlsplit(url)
    return kind, url, make_proxy(parts.hostname or "127.0.0.1", parts.port)
