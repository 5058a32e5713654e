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
    result = inner.runpytest_subprocess("-p", "no:cacheprovider")
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
    result = inner.runpytest_subprocess("-p", "no:cacheprovider")
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
    inner.makeini("[pytest]\ntxnsafety_mode = log\n")
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
