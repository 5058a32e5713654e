"""A cut PostgreSQL connection drops a session lock; the holder learns it before it writes.

The server ends the session when its connection goes, and the advisory lock with
it: another client gets the lock at once.  The old holder's local deadline is
still ahead, so only a look at its connection can tell it -- ``ensure_held()``
must fail (without ``check_backend``), before the write.
"""
from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import pytest

from txnsafety.locks import LeaseLost, global_lock
from txnsafety.report import StompingError


def _through(proxy, postgres_url: str, scope: str) -> str:  # noqa: ANN001
    parts = urlsplit(postgres_url)
    url = parts._replace(netloc=f"{parts.username}:{parts.password}@127.0.0.1:{proxy.port}").geturl()
    return f"{url}{'&' if '?' in url else '?'}scope={scope}"


@pytest.fixture
def pg_proxy(postgres_url: str, make_proxy):  # noqa: ANN001, ANN201
    parts = urlsplit(postgres_url)
    return make_proxy(parts.hostname or "127.0.0.1", parts.port or 5432)


@pytest.mark.txnsafety_allow("the lease ends with the cut connection: TXN104 at the release is right")
@pytest.mark.parametrize("scope", ["session", "transaction"])
def test_cut_connection_fails_ensure_held(postgres_url: str, pg_proxy, key: str, scope: str) -> None:  # noqa: ANN001
    url = _through(pg_proxy, postgres_url, scope)
    with pytest.raises(StompingError):
        with global_lock(key, backend=url, lease=30) as lease:
            lease.ensure_held()
            pg_proxy.cut()
            # the server dropped the lock with the session: somebody else gets it
            with global_lock(key, backend=postgres_url, lease=5, wait_timeout=10) as other:
                assert other.fence > lease.fence
            with pytest.raises(LeaseLost, match="connection"):
                lease.ensure_held()
            assert not lease.is_live()


@pytest.mark.txnsafety_allow("the lease ends with the cut connection: TXN104 at the release is right")
def test_cut_connection_fails_aensure_held(postgres_url: str, pg_proxy, key: str) -> None:  # noqa: ANN001
    url = _through(pg_proxy, postgres_url, "session")

    async def main() -> None:
        with pytest.raises(StompingError):
            async with global_lock(key, backend=url, lease=30) as lease:
                pg_proxy.cut()
                async with global_lock(key, backend=postgres_url, lease=5, wait_timeout=10):
                    pass
                with pytest.raises(LeaseLost):
                    await lease.aensure_held()
    asyncio.run(main())
