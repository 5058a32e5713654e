"""A missing server skips a test on a laptop and fails it in CI (never a silent skip)."""
from __future__ import annotations

import socket

import pytest

from tests import servers


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"redis://127.0.0.1:{port}/0"   # nothing listens there now


def test_missing_server_fails_under_ci(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="not answering"):
        servers.require(_closed_port_url(), "Redis")


def test_missing_server_skips_locally(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="bash .ci/servers"):
        servers.require(_closed_port_url(), "Redis")


def test_answering_server_is_returned():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        url = f"redis://127.0.0.1:{s.getsockname()[1]}/0"
        assert servers.require(url, "Redis") == url
