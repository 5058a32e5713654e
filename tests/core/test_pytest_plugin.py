"""The pytest plugin, run in a real inner pytest session (pytester)."""
from __future__ import annotations

import pytest

MODELS = '''
import threading
import txnsafety

__txnsafety_library__ = True  # a data layer: report its callers' lines

@txnsafety.written_in_transaction()
class Row:
    def __init__(self, pk):
        self.pk = pk

def read(pk):
    row = Row(pk)
    txnsafety.record_read(row, key=pk)
    return row

def write(row):
    txnsafety.record_write(row, key=row.pk)
'''


#: These tests call the application's code from the test itself, outside any request: judged
#: like a request's only when asked (the default keeps a test's own code quiet).
CHECKED = "--txnsafety-outside-requests=check"


@pytest.fixture
def inner(pytester):
    pytester.makepyfile(models=MODELS)
    pytester.syspathinsert()
    return pytester


def test_a_stomping_test_fails_with_the_report(inner):
    inner.makepyfile(test_app='''
from models import read, write
def test_stomp():
    write(read(1))
''')
    result = inner.runpytest_subprocess("-p", "no:cacheprovider", CHECKED)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*TXN102 unprotected*", "*read at*test_app.py:3 in test_stomp*"])


def test_a_violation_swallowed_by_the_code_still_fails_the_test(inner):
    inner.makepyfile(test_app='''
from models import read, write
def test_swallowed():
    try:
        write(read(1))
    except Exception:
        pass
''')
    result = inner.runpytest_subprocess("-p", "no:cacheprovider", CHECKED)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*committed 1 stomping violation*"])


def test_a_violation_in_another_thread_fails_the_test(inner):
    inner.makepyfile(test_app='''
import threading, txnsafety
from models import read, write
def test_thread():
    def job():
        with txnsafety.request_scope("worker"):
            try:
                write(read(2))
            except txnsafety.StompingError:
                pass
    t = threading.Thread(target=job); t.start(); t.join()
''')
    result = inner.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)


def test_the_fixture_collects_instead_of_failing(inner):
    inner.makepyfile(test_app='''
import txnsafety
from models import read, write
def test_collect(txnsafety_violations):
    write(read(1))
    assert txnsafety_violations.codes() == ["TXN102"]
def test_safe():
    with txnsafety.transaction():
        write(read(1))
''')
    result = inner.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


def test_ini_mode_log_only_logs(inner):
    inner.makeini("[pytest]\ntxnsafety_mode = log\ntxnsafety_outside_requests = check\n")
    inner.makepyfile(test_app='''
from models import read, write
def test_stomp(txnsafety_violations):
    pass
def test_logged(caplog):
    write(read(1))  # logged, not raised; the plugin still fails the test at its end
''')
    result = inner.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*committed 1 stomping violation*"])


# -- adopting it on a real suite (issue 16) and misconfiguration (issue 18) ---------------------

APP = '''
from models import read, write

def pay(pk):
    """Application code that catches everything: an error page, a 500, a False."""
    try:
        write(read(pk))
    except Exception:
        return "payment failed"
    return "paid"
'''


def test_a_test_failing_for_another_reason_keeps_its_reports(inner):
    inner.makepyfile(app=APP, test_app='''
from models import read, write
def test_other_failure():
    write(read(1))
    assert 1 == 2, "the test's own assertion"
''')
    result = inner.runpytest_subprocess("-p", "no:cacheprovider", CHECKED, "--txnsafety-mode=log")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*the test's own assertion*", "*txnsafety: this test's code committed 1*",
                                 "*TXN102 unprotected*"])


def test_raise_mode_swallowed_by_broad_except_still_fails_with_the_report(inner):
    inner.makepyfile(app=APP, test_app='''
from app import pay
def test_pay_fails_differently():
    assert pay(1) == "paid"
def test_pay_swallowed():
    pay(2)
''')
    result = inner.runpytest_subprocess("-p", "no:cacheprovider", CHECKED)
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    assert out.count("TXN102 unprotected") >= 2, out
    result.stdout.fnmatch_lines(["*AssertionError: assert 'payment failed' == 'paid'*",
                                 "*this test's code committed 1*"])


REQUESTS = '''
import pytest
import txnsafety
from models import read, write

def request(pk, times=1):
    """What a test client's call is: the application's code in a request's own scope."""
    for _ in range(times):
        with txnsafety.request_scope("request"):
            write(read(pk))

@pytest.mark.parametrize("pk", [1, 2, 3])
def test_stomp(pk):
    request(pk, times=pk)

def test_own_code():
    write(read(9))                     # the test's own code, outside any request

def test_clean():
    pass
'''


def test_report_mode_lists_each_place_once_with_its_count_and_the_tests_own_code_apart(inner, tmp_path):
    inner.makepyfile(test_app=REQUESTS)
    out = tmp_path / "reports.json"
    result = inner.runpytest_subprocess("-p", "no:cacheprovider", "--txnsafety-mode=report",
                                        f"--txnsafety-json={out}")
    result.assert_outcomes(passed=5)
    result.stdout.fnmatch_lines([
        "*txnsafety report mode: 1 distinct report(s) in 3 test(s); no test failed for them*",
        "TXN102 unprotected: models.Row  (6 report(s) in 3 test(s): test_app.py::test_stomp[[]1[]] and 2 more)",
        "  write at *test_app.py:9 in request*",
        "*txnsafety: outside any request (tests' own code, setUp): 1 place(s), 1 report(s); quiet*",
        "TXN102 unprotected: models.Row  (1 test(s): test_app.py::test_own_code)",
        "  write at *test_app.py:16 in test_own_code*"])
    import json
    requests, own = json.loads(out.read_text())
    assert requests["tests"] == [f"test_app.py::test_stomp[{pk}]" for pk in (1, 2, 3)]
    assert (requests["count"], requests["outside_request"], requests["code"]) == (6, False, "TXN102")
    assert (own["count"], own["outside_request"], own["tests"]) == (1, True, ["test_app.py::test_own_code"])


@pytest.mark.parametrize("args, fails", [((), False), ((CHECKED,), True)])
def test_the_tests_own_code_is_quiet_unless_checked(inner, args, fails):
    inner.makepyfile(test_app=REQUESTS)
    result = inner.runpytest_subprocess("-p", "no:cacheprovider", *args)
    result.assert_outcomes(passed=1 if fails else 2, failed=4 if fails else 3)
    if not fails:   # only the requests' reports fail their tests; the test's own write is counted apart
        result.stdout.fnmatch_lines([
            "*txnsafety: outside any request (tests' own code, setUp): 1 place(s), 1 report(s); quiet*",
            "txnsafety: --txnsafety-mode=report lists them"])
    else:
        result.stdout.fnmatch_lines(["FAILED test_app.py::test_own_code*"])


def test_a_bad_outside_requests_value_is_a_usage_error(inner):
    inner.makepyfile(test_app="def test_x():\n    pass\n")
    result = inner.runpytest_subprocess("-p", "no:cacheprovider", "--txnsafety-outside-requests=loud")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*txnsafety_outside_requests = 'loud' is not one of quiet, check*"])


@pytest.mark.parametrize("args, ini, env, message", [
    ((), "[pytest]\ntxnsafety_mode = warn\n", None, "*txnsafety: 'ini txnsafety_mode = warn' is not a mode*"),
    (("--txnsafety-mode=loud",), None, None, "*'--txnsafety-mode=loud' is not a mode*"),
    ((), None, "warn", "*environment variable TXNSAFETY_MODE='warn' is not a mode*"),
])
def test_a_bad_mode_is_a_usage_error(inner, monkeypatch, args, ini, env, message):
    if ini:
        inner.makeini(ini)
    if env:
        monkeypatch.setenv("TXNSAFETY_MODE", env)
    inner.makepyfile(test_app="def test_x():\n    pass\n")
    result = inner.runpytest_subprocess("-p", "no:cacheprovider", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    result.stderr.fnmatch_lines([message])


def test_the_command_line_mode_beats_the_ini(inner):
    inner.makeini("[pytest]\ntxnsafety_mode = raise\n")
    inner.makepyfile(test_app='''
import txnsafety
def test_mode():
    assert txnsafety.settings.mode == "collect"
''')
    result = inner.runpytest_subprocess("-p", "no:cacheprovider", "--txnsafety-mode=collect")
    result.assert_outcomes(passed=1)
