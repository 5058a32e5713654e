"""Django's own test runner (``manage.py test``), as supported as pytest.

::

    TEST_RUNNER = "txnsafety.django.testrunner.TxnSafetyRunner"

Each test runs in its own checker scope (code called straight from a test is
checked like a request); ``suppress_in_test()`` works; a test whose code stomps
fails with the report, and a test that fails for another reason keeps its reports.
``manage.py test --txnsafety-mode=report`` adopts it on an existing suite: no test
fails because of txnsafety and the run ends with each distinct report.  The mode:
``--txnsafety-mode``, else ``TXNSAFETY_MODE``, else ``raise``.  ``--parallel`` is
supported: each worker process checks its own tests (the report-mode summary covers
serial runs only; run the adoption pass without ``--parallel``).
"""
from __future__ import annotations

import sys
import unittest
from typing import Any

from django.test.runner import DiscoverRunner, ParallelTestSuite, RemoteTestResult, RemoteTestRunner

from ..config import MODES, ConfigurationError, configure, mode_from_environment
from ..context import RequestScope, close_scope, open_scope
from ..report import StompingError, Violation, _test_mode, add_listener, remove_listener
from ..summary import group_reports

RUNNER_MODES = (*MODES, "report")


class _Checked:
    """Result mixin: a scope and a listener around each test; violations fail it."""

    txnsafety_report_mode = False
    #: (test id, violation) of every test, kept by the runner (serial runs)
    txnsafety_sink: list[tuple[str, Violation]] | None = None

    def startTest(self, test: unittest.TestCase) -> None:
        self._txn_seen: list[Violation] = []
        add_listener(self._txn_seen.append)
        self._txn_scope = RequestScope(name=test.id())
        self._txn_token = open_scope(self._txn_scope)
        super().startTest(test)  # type: ignore[misc]

    def stopTest(self, test: unittest.TestCase) -> None:
        super().stopTest(test)  # type: ignore[misc]
        seen = self._txn_close()
        if self.txnsafety_sink is not None:
            self.txnsafety_sink.extend((test.id(), v) for v in seen)

    def _txn_close(self) -> list[Violation]:
        seen = getattr(self, "_txn_seen", [])
        if getattr(self, "_txn_token", None) is not None:
            remove_listener(seen.append)
            try:
                close_scope(self._txn_scope, self._txn_token)
            finally:
                self._txn_token = None
        return seen

    def _txn_failing(self) -> list[Violation]:
        return [] if self.txnsafety_report_mode else list(getattr(self, "_txn_seen", []))

    def addSuccess(self, test: unittest.TestCase) -> None:
        seen = self._txn_failing()
        if not seen:
            super().addSuccess(test)  # type: ignore[misc]
            return
        report = "\n\n".join(str(v) for v in seen)
        try:
            raise AssertionError(f"txnsafety: this test's code committed {len(seen)} stomping violation(s):\n\n"
                                 f"{report}")
        except AssertionError:
            super().addFailure(test, sys.exc_info())  # type: ignore[misc]

    def addError(self, test: unittest.TestCase, err: Any) -> None:
        self._txn_note(err)
        super().addError(test, err)  # type: ignore[misc]

    def addFailure(self, test: unittest.TestCase, err: Any) -> None:
        self._txn_note(err)
        super().addFailure(test, err)  # type: ignore[misc]

    def _txn_note(self, err: Any) -> None:
        exc = err[1] if isinstance(err, tuple) and len(err) > 1 else None
        others = [v for v in self._txn_failing()
                  if not (isinstance(exc, StompingError) and exc.violation is v)]
        if others and exc is not None and hasattr(exc, "add_note"):
            exc.add_note(f"txnsafety: this test's code also committed {len(others)} stomping violation(s):\n\n"
                         + "\n\n".join(str(v) for v in others))


class _CheckedRemoteResult(_Checked, RemoteTestResult):
    """A ``--parallel`` worker's result (events go back to the parent pickled)."""


class _CheckedRemoteRunner(RemoteTestRunner):
    resultclass = _CheckedRemoteResult


class _CheckedParallelSuite(ParallelTestSuite):
    runner_class = _CheckedRemoteRunner


class TxnSafetyRunner(DiscoverRunner):
    """``DiscoverRunner`` with the txnsafety checker around every test."""

    parallel_test_suite = _CheckedParallelSuite

    def __init__(self, *args: Any, txnsafety_mode: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        try:
            mode = txnsafety_mode or mode_from_environment() or "raise"
        except ConfigurationError as exc:
            raise SystemExit(str(exc)) from None
        if mode not in RUNNER_MODES:
            raise SystemExit(f"txnsafety: --txnsafety-mode={mode} is not a mode; "
                             f"use one of {', '.join(RUNNER_MODES)}")
        self.txnsafety_mode = mode
        self.txnsafety_reported: list[tuple[str, Violation]] = []

    @classmethod
    def add_arguments(cls, parser: Any) -> None:
        super().add_arguments(parser)
        parser.add_argument("--txnsafety-mode", dest="txnsafety_mode", default=None,
                            help="raise (default), log, collect: a test whose code stomps fails; "
                                 "report: no test fails, the run ends with every distinct report")

    def setup_test_environment(self, **kwargs: Any) -> None:
        super().setup_test_environment(**kwargs)
        _test_mode.set()  # suppress_in_test() works; the TXNSAFETY MODE setting no longer applies
        configure(read_sites="always", mode="collect" if self.txnsafety_mode == "report" else self.txnsafety_mode)
        _Checked.txnsafety_report_mode = self.txnsafety_mode == "report"
        _Checked.txnsafety_sink = self.txnsafety_reported

    def get_resultclass(self) -> Any:
        base = super().get_resultclass() or unittest.TextTestResult
        return type(f"TxnSafety{base.__name__}", (_Checked, base), {})

    def suite_result(self, suite: Any, result: Any, **kwargs: Any) -> int:
        if self.txnsafety_mode == "report":
            self._print_summary()
        return super().suite_result(suite, result, **kwargs)

    def _print_summary(self) -> None:
        groups = group_reports(self.txnsafety_reported)
        print(f"\ntxnsafety report mode: {len(groups)} distinct report(s); no test failed for them",
              file=sys.stderr)
        for group in groups:
            print(group.render(), file=sys.stderr)
