"""pytest plugin (entry point ``pytest11``): a test fails when its code stomps.

* Every test runs inside its own checker scope, so code called directly from a
  test is checked like a request.
* The mode is ``raise`` under pytest (ini ``txnsafety_mode`` or the
  ``TXNSAFETY_MODE`` variable change it): a violation raises at the write.
* A violation reported anywhere in the process while the test runs — a server
  thread, a worker task, code that swallowed the exception — fails the test at its
  end with the full report.
* Tests that *expect* violations ask for the ``txnsafety_violations`` fixture:
  violations are collected (not raised) for assertions and do not fail the test.
"""
from __future__ import annotations

import os
import threading
from typing import Iterator

import pytest

from .codes import Code
from .config import settings
from .context import request_scope
from .report import Violation, _test_mode, add_listener, remove_listener

_FIXTURE = "txnsafety_violations"


class ViolationLog(list):
    """The violations of one test, in order; thread-safe appends."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def add(self, violation: Violation) -> None:
        with self._lock:
            self.append(violation)

    def codes(self) -> list[str]:
        """The codes reported, in order (``["TXN101", ...]``)."""
        return [v.code.value for v in self]

    def of(self, code: Code | str) -> list[Violation]:
        return [v for v in self if v.code == code]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("txnsafety_mode", "txnsafety checker mode under pytest: raise, log or collect",
                  default="raise")


def pytest_configure(config: pytest.Config) -> None:
    _test_mode.set()
    config.addinivalue_line("markers", "txnsafety_allow(reason): this test may commit violations")
    from .config import configure
    configure(read_sites="always")  # a failing test names every site; speed matters less here
    if "TXNSAFETY_MODE" not in os.environ:
        configure(mode=config.getini("txnsafety_mode") or "raise")


@pytest.fixture
def txnsafety_violations() -> Iterator[ViolationLog]:
    """Collect the violations of this test (any thread) instead of raising them."""
    log = ViolationLog()
    previous = settings.mode
    settings.mode = "collect"
    add_listener(log.add)
    try:
        yield log
    finally:
        remove_listener(log.add)
        settings.mode = previous


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    seen = ViolationLog()
    expects = _FIXTURE in getattr(item, "fixturenames", ()) or item.get_closest_marker("txnsafety_allow")
    add_listener(seen.add)
    try:
        with request_scope(name=item.nodeid):
            result = yield
    finally:
        remove_listener(seen.add)
    if seen and not expects:
        report = "\n\n".join(str(v) for v in seen)
        pytest.fail(f"txnsafety: this test's code committed {len(seen)} stomping violation(s):\n\n{report}",
                    pytrace=False)
    return result
