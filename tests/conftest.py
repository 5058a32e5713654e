"""Fixtures shared by the whole suite: the real servers (see tests/servers.py)."""
from __future__ import annotations

import pytest

from tests import servers

pytest_plugins = ["pytester"]


@pytest.fixture(scope="session")
def postgres_url() -> str:
    return servers.require(servers.POSTGRES_URL, "PostgreSQL")


@pytest.fixture(scope="session")
def redis_url() -> str:
    return servers.require(servers.REDIS_URL, "Redis")


@pytest.fixture(scope="session")
def memcached_url() -> str:
    return servers.require(servers.MEMCACHED_URL, "memcached")


@pytest.fixture(scope="session")
def mysql_url() -> str:
    return servers.require(servers.MYSQL_URL, "MariaDB")
