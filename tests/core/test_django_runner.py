"""Django's own test runner (``manage.py test``) of a real project, with and without ours."""
from __future__ import annotations

import textwrap

from .django_project import manage

RUNNER = 'TEST_RUNNER = "txnsafety.django.testrunner.TxnSafetyRunner"'

TESTS = '''
import txnsafety
from django.test import TestCase
from shop.models import Account


def pay(pk):
    """Application code that catches everything and returns an error instead."""
    try:
        account = Account.objects.get(pk=pk)
        account.balance += 1
        account.save()
    except Exception:
        return "payment failed"
    return "paid"


class Payments(TestCase):
    @classmethod
    def setUpTestData(cls):
        Account.objects.create(pk=1, balance=0)

    def test_stomp(self):
        account = Account.objects.get(pk=1)
        account.balance += 1
        account.save()

    def test_swallowed(self):
        pay(1)

    def test_other_failure(self):
        self.assertEqual(pay(1), "paid")

    def test_factory_data(self):
        with txnsafety.suppress_in_test(reason="test data, built the way production never does"):
            account = Account.objects.get(pk=1)
            account.balance += 1
            account.save()

    def test_clean(self):
        self.assertEqual(Account.objects.count(), 1)
'''


def _project(tmp_path, tests=TESTS):
    (tmp_path / "shop").mkdir(exist_ok=True)
    (tmp_path / "shop" / "tests.py").write_text(textwrap.dedent(tests))


def test_our_runner_checks_each_test_and_keeps_reports_of_failing_tests(tmp_path):
    _project(tmp_path)
    proc = manage(tmp_path, "test", "shop", "-v", "2", extra=RUNNER)
    out = proc.stderr
    assert proc.returncode == 1, out
    assert "FAILED (failures=2, errors=1)" in out, out
    for test, outcome in (("clean", "ok"), ("factory_data", "ok"), ("stomp", "ERROR"), ("swallowed", "FAIL"),
                          ("other_failure", "FAIL")):
        assert f"test_{test} (shop.tests.Payments.test_{test}) ... {outcome}" in out, out
    # raise mode: at the write; swallowed: at the test's end; the other failure keeps the report
    assert "StompingError: TXN102 unprotected" in out
    assert "AssertionError: txnsafety: this test's code committed 1 stomping violation(s)" in out
    assert "AssertionError: 'payment failed' != 'paid'" in out
    assert "txnsafety: this test's code also committed 1 stomping violation(s)" in out
    assert out.count("TXN102 unprotected") == 3, out


def test_report_mode_fails_no_test_and_summarises(tmp_path):
    _project(tmp_path)
    proc = manage(tmp_path, "test", "shop", "--txnsafety-mode=report", extra=RUNNER)
    out = proc.stderr
    assert proc.returncode == 0, out
    assert "txnsafety report mode: 2 distinct report(s); no test failed for them" in out, out
    assert "TXN102 unprotected: shop.Account  (2 test(s): shop.tests.Payments.test_" in out, out


def test_a_bad_runner_mode_names_the_option(tmp_path):
    _project(tmp_path)
    proc = manage(tmp_path, "test", "shop", "--txnsafety-mode=warn", extra=RUNNER)
    assert proc.returncode != 0
    assert "txnsafety: --txnsafety-mode=warn is not a mode; use one of raise, log, collect, report" in proc.stderr


def test_suppress_in_test_works_under_the_default_runner_too(tmp_path):
    _project(tmp_path, tests='''
import txnsafety
from django.test import TestCase

class T(TestCase):
    def test_factory(self):
        with txnsafety.suppress_in_test(reason="test data"):
            pass
''')
    proc = manage(tmp_path, "test", "shop")
    assert proc.returncode == 0, proc.stderr
    assert "OK" in proc.stderr


def test_parallel_workers_check_their_tests(tmp_path):
    _project(tmp_path, tests=TESTS + '''

class More(Payments):
    pass
''')
    proc = manage(tmp_path, "test", "shop", "--parallel", "2", extra=RUNNER)
    out = proc.stderr
    assert proc.returncode == 1, out
    assert "FAILED (failures=4, errors=2)" in out, out
    assert out.count("TXN102 unprotected") == 6, out
    assert out.count("also committed 1 stomping violation(s)") == 2, out
