"""pytest plugin (entry point ``pytest11``): a test fails when its code stomps.

* Every test runs inside its own checker scope, so code called directly from a
  test is checked like a request.
* The mode is ``raise`` under pytest: a violation raises at the write.  The
  ``--txnsafety-mode`` option, else the ``TXNSAFETY_MODE`` variable, else the ini
  ``txnsafety_mode`` change it; an unknown value is a usage error.
* A violation reported anywhere in the process while the test runs — a server
  thread, a worker task, code that swallowed the exception — fails the test at its
  end with the full report.  A test that fails for another reason (application code
  that caught the StompingError and failed differently) fails with the report
  attached, never without it.
* ``report`` mode is for adopting the checker on an existing suite: nothing raises,
  no test fails because of txnsafety, and the session ends with every distinct report
  (code, model, sites, how many tests) — also as JSON with ``--txnsafety-json=PATH``.
* Tests that *expect* violations ask for the ``txnsafety_violations`` fixture:
  violations are collected (not raised) for assertions and do not fail the test.
* Writes made by a test's own code outside any request (the test body, a unittest
  ``setUp``, a helper the test or its app factory calls) are told apart from requests':
  ``--txnsafety-outside-requests=quiet`` (the default; ini ``txnsafety_outside_requests``)
  neither raises them nor fails the test, and lists them in a section of their own; ``check``
  judges them like a request's.  A test that expects violations sees them all.
* Each place (code, model, sites) is reported once per run with its count: the summary
  and the JSON list places, each with how many reports and which tests.
"""
from __future__ import annotations

import json
import threading
from typing import Iterator

import pytest

from .codes import Code
from .config import MODES, ConfigurationError, mode_from_environment, settings
from .context import mark_test_code, request_scope, unmark_test_code
from .report import StompingError, Violation, _test_mode, add_listener, remove_listener
from .summary import ReportGroup, group_reports

_FIXTURE = "txnsafety_violations"
#: Modes under pytest: the checker's own, plus ``report`` (collect, summarise, fail nothing).
PYTEST_MODES = (*MODES, "report")
#: What becomes of the reports of a test's own code, outside any request.
OUTSIDE_REQUESTS = ("quiet", "check")
_STATE = pytest.StashKey["_SessionState"]()


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


class _SessionState:
    def __init__(self, mode: str, source: str, outside: str = "quiet") -> None:
        self.mode = mode
        self.source = source
        self.outside = outside  # OUTSIDE_REQUESTS
        self.reported: list[tuple[str, Violation]] = []  # report mode: (test id, violation)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("txnsafety_mode", "txnsafety checker mode under pytest: raise, log, collect or report",
                  default="raise")
    group = parser.getgroup("txnsafety", "txnsafety lost-write checker")
    group.addoption("--txnsafety-mode", dest="txnsafety_mode", default=None, metavar="MODE",
                    help="raise (default), log, collect: a test whose code stomps fails; "
                         "report: no test fails, the session ends with every distinct report")
    group.addoption("--txnsafety-json", dest="txnsafety_json", default=None, metavar="PATH",
                    help="write the session's reports as JSON to PATH (any mode): one entry a place, "
                         "with its count and tests")
    parser.addini("txnsafety_outside_requests", "txnsafety: reports of a test's own code outside any "
                  "request: quiet (listed apart, fail nothing) or check (like a request's)", default="quiet")
    group.addoption("--txnsafety-outside-requests", dest="txnsafety_outside_requests", default=None,
                    metavar="quiet|check", help="writes of a test's own code outside any request (the test "
                    "body, setUp): quiet (default: listed apart, never raised) or check (judged like a request's)")


def _chosen_mode(config: pytest.Config) -> tuple[str, str]:
    """The mode and where it came from: command line, then environment, then ini."""
    cli = config.getoption("txnsafety_mode")
    if cli:
        return cli, f"--txnsafety-mode={cli}"
    try:
        env = mode_from_environment()
    except ConfigurationError as exc:
        raise pytest.UsageError(str(exc)) from None
    if env:
        return env, f"TXNSAFETY_MODE={env}"
    ini = config.getini("txnsafety_mode") or "raise"
    return ini, f"ini txnsafety_mode = {ini}"


def pytest_configure(config: pytest.Config) -> None:
    mode, source = _chosen_mode(config)
    if mode not in PYTEST_MODES:
        raise pytest.UsageError(
            f"txnsafety: {source!r} is not a mode; use one of {', '.join(PYTEST_MODES)}")
    _test_mode.set()
    config.addinivalue_line("markers", "txnsafety_allow(reason): this test may commit violations")
    from .config import configure
    configure(read_sites="always")  # a failing test names every site; speed matters less here
    configure(mode="collect" if mode == "report" else mode)
    outside = config.getoption("txnsafety_outside_requests") or config.getini("txnsafety_outside_requests")
    if outside not in OUTSIDE_REQUESTS:
        raise pytest.UsageError(f"txnsafety: txnsafety_outside_requests = {outside!r} is not one of "
                                f"{', '.join(OUTSIDE_REQUESTS)}")
    config.stash[_STATE] = _SessionState(mode, source, outside)


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


def _describe(violations: list[Violation], also: bool = False) -> str:
    report = "\n\n".join(str(v) for v in violations)
    verb = "also committed" if also else "committed"
    return f"txnsafety: this test's code {verb} {len(violations)} stomping violation(s):\n\n{report}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    state: _SessionState | None = item.config.stash.get(_STATE, None)
    seen = ViolationLog()
    expects = _FIXTURE in getattr(item, "fixturenames", ()) or item.get_closest_marker("txnsafety_allow")
    quiet = bool(state is not None and state.outside == "quiet" and not expects)
    add_listener(seen.add)
    try:
        with request_scope(name=item.nodeid) as scope:
            mark_test_code(scope, quiet=quiet)
            try:
                result = yield
            finally:
                unmark_test_code(scope)
    except BaseException as exc:
        failing = _failing(seen, quiet)
        if failing and not expects and not (state and state.mode == "report"):
            _attach(item, exc, failing)
        raise
    finally:
        remove_listener(seen.add)
        if state is not None and not expects:
            state.reported.extend((item.nodeid, v) for v in seen)
    failing = _failing(seen, quiet)
    if failing and not expects and not (state and state.mode == "report"):
        pytest.fail(_describe(failing), pytrace=False)
    return result


def _failing(seen: list[Violation], quiet: bool) -> list[Violation]:
    """The reports that fail the test: not those of its own code outside requests, when quiet."""
    return [v for v in seen if not (quiet and v.outside_request)]


def _attach(item: pytest.Item, exc: BaseException, seen: list[Violation]) -> None:
    """Keep the reports of a test that fails for another reason: they are often why."""
    others = [v for v in seen if not (isinstance(exc, StompingError) and exc.violation is v)]
    if not others:
        return  # the failure is the report itself
    text = _describe(others, also=isinstance(exc, StompingError))
    if isinstance(exc, pytest.fail.Exception) or not hasattr(exc, "add_note"):
        item.add_report_section("call", "txnsafety", text)  # outcome exceptions show no notes
    else:
        exc.add_note(text)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    state: _SessionState | None = config.stash.get(_STATE, None)
    if state is None:
        return
    in_requests = group_reports((t, v) for t, v in state.reported if not v.outside_request)
    outside = group_reports((t, v) for t, v in state.reported if v.outside_request)
    path = config.getoption("txnsafety_json")
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump([g.as_dict() for g in in_requests + outside], fh, indent=2)
    write = terminalreporter.write_line
    if state.mode == "report":
        tests = len({test for test, v in state.reported if not v.outside_request})
        terminalreporter.write_sep("=", f"txnsafety report mode: {len(in_requests)} distinct report(s) in {tests} "
                                        "test(s); no test failed for them")
        for group in in_requests:
            write(group.render())
    if outside:
        _outside_section(terminalreporter, state, outside)
    if path:
        write(f"txnsafety: reports written to {path}")


def _outside_section(terminalreporter: pytest.TerminalReporter, state: _SessionState,
                     groups: list[ReportGroup]) -> None:
    """The reports of tests' own code outside any request: apart from the requests'."""
    count = sum(g.count for g in groups)
    how = ("quiet: no test failed for them; --txnsafety-outside-requests=check judges them like requests"
           if state.outside == "quiet" else "checked like requests")
    terminalreporter.write_sep("-", f"txnsafety: outside any request (tests' own code, setUp): {len(groups)} "
                                    f"place(s), {count} report(s); {how}")
    if state.mode == "report" or state.outside == "check":
        for group in groups:
            terminalreporter.write_line(group.render())
    else:
        terminalreporter.write_line("txnsafety: --txnsafety-mode=report lists them")
