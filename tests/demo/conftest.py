"""The stomp lab on SQLite (a temporary file) and on the real PostgreSQL server; one demo run."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

REQUESTS = 12


@pytest.fixture(params=["sqlite", "postgresql"])
def lab_url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'lab.sqlite3'}"
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def lab(lab_url):
    from txnsafety_lab.database import open_lab
    opened = open_lab(lab_url, pool_size=12)
    yield opened
    opened.dispose()


def run_demo(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "txnsafety.cli", "demo", "--no-progress", *args],
                          capture_output=True, text=True, cwd=cwd, timeout=300)


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory):
    """One default run (SQLite, memory locks, WSGI and ASGI): its process and its report."""
    work = tmp_path_factory.mktemp("demo")
    result = run_demo("--requests", str(REQUESTS), "--concurrency", "4", cwd=work)
    report_dir = work / "txnsafety-demo-report"
    data = json.loads((report_dir / "report.json").read_text()) if (report_dir / "report.json").exists() else None
    return result, data, report_dir
