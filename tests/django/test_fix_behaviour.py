"""``txnsafety lint --fix`` on real Django: the fixed code does what the racy code did, run
alone, and loses no write when two requests interleave, on SQLite and PostgreSQL.

The racy function is linted and fixed as ``--fix`` fixes it (``fix.plan``), then both
versions are compiled and run against the example app's ``Counter``.  Two threads meet at a
barrier after the read (the interleaving that loses an update, made certain): the racy
version loses one increment, the fixed one none.  Run alone, the runtime checker reports
the racy version and nothing of the fixed one."""
from __future__ import annotations

import threading
import types

import pytest

from django.db import connections

from fixtures.django_app.models import Counter
from txnsafety_lint.analysis import analyze_source
from txnsafety_lint.fix.apply import fixed
from txnsafety_lint.fix.model import Applicability
from txnsafety_lint.fix.plan import FilePlan, fix_for
from txnsafety_lint.fix.source import FileSource

RACY = '''\
from fixtures.django_app.models import Counter


def bump(pk, n, alias, pause):
    counter = Counter.objects.using(alias).get(pk=pk)
    pause()
    counter.value += n
    counter.save()
    return counter.value
'''


def fixed_source() -> str:
    src = FileSource("bump.py", RACY.encode())
    findings = analyze_source(RACY, None, "bump.py")
    assert [f.code for f in findings] == ["TXN106"]
    plan = FilePlan("bump.py", src, {f: fix_for(src, f) for f in findings})
    assert next(iter(plan.fixes.values())).applicability is Applicability.SAFE
    outcome = fixed(plan, unsafe_fixes=False)
    assert outcome.new is not None and "counter.value += n" not in outcome.new
    return outcome.new


def load(source: str):
    module = types.ModuleType("bump_under_test")
    exec(compile(source, "bump.py", "exec"), module.__dict__)
    return module.bump


def test_the_fixed_counter_returns_and_stores_what_the_racy_one_did(db, txnsafety_violations):
    racy, safe = load(RACY), load(fixed_source())
    assert racy(1, 3, db, lambda: None) == 3
    assert txnsafety_violations.codes() == ["TXN102"]
    txnsafety_violations.clear()
    assert safe(1, 4, db, lambda: None) == 7              # refreshed: it reads the value back
    assert Counter.objects.using(db).get(pk=1).value == 7
    assert txnsafety_violations == []


def _two_at_once(bump, db) -> list:
    barrier = threading.Barrier(2, timeout=30)
    results: list = []

    def request() -> None:
        try:
            results.append(bump(1, 1, db, barrier.wait))
        finally:
            connections[db].close()
    threads = [threading.Thread(target=request) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


@pytest.mark.txnsafety_allow("the racy version is run on purpose")
def test_racy_loses_an_increment_fixed_loses_none(db):
    _two_at_once(load(RACY), db)
    assert Counter.objects.using(db).get(pk=1).value == 1            # one increment lost
    assert sorted(_two_at_once(load(fixed_source()), db)) in ([2, 3], [3, 3])
    assert Counter.objects.using(db).get(pk=1).value == 3            # 1 + 2: none lost
