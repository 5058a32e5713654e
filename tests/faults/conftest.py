"""Fixtures of the fault suite: its own servers, a fault-injecting proxy."""
from __future__ import annotations

import uuid
from pathlib import Path
from typing import Iterator

import pytest

from tests.faults.proxy import FaultProxy
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
