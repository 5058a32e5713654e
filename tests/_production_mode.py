"""The checker's settings as production runs them, for tests.

txnsafety's pytest plugin sets ``read_sites="always"`` (a failing test names every
site).  Production keeps the default, ``adaptive``: no read is located until its model
had a violation in this process, and the cheap common-read and quick-write paths run
only then.  :func:`production_read_sites` puts that back for one test (the CI-run
``test_production_mode`` modules); as a plugin (``-p tests._production_mode``) this
module runs a whole suite so, each test starting as a fresh process would, with no
model's sites asked for by an earlier test's violations.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest


@contextmanager
def production_read_sites() -> Iterator[None]:
    """``read_sites="adaptive"`` and no model's sites wanted yet; the test's settings after."""
    from txnsafety.config import configure, settings
    from txnsafety.sites import sites_wanted
    before, wanted = settings.read_sites, set(sites_wanted)
    sites_wanted.clear()
    configure(read_sites="adaptive")
    try:
        yield
    finally:
        configure(read_sites=before)
        sites_wanted.clear()
        sites_wanted.update(wanted)


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    from txnsafety.config import configure
    configure(read_sites="adaptive")  # after txnsafety's own plugin set "always"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    from txnsafety.sites import sites_wanted
    sites_wanted.clear()  # what earlier tests' violations asked for: a fresh process has none
