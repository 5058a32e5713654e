"""``txnsafety lint --fix`` on real SQLAlchemy: ``obj.n += d`` rewritten to ``obj.n =
Model.n + d`` stores what it stored, run alone, and loses no increment when two sessions
interleave after their reads (a barrier makes the losing interleaving certain), on SQLite and
PostgreSQL."""
from __future__ import annotations

import threading
import types

import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from fixtures.sqla_app.models import Counter
from txnsafety_lint.analysis import analyze_source
from txnsafety_lint.fix.apply import fixed
from txnsafety_lint.fix.model import Applicability
from txnsafety_lint.fix.plan import FilePlan, fix_for
from txnsafety_lint.fix.source import FileSource

RACY = '''\
from fixtures.sqla_app.models import Counter


def bump(session, pk, n, pause):
    counter = session.get(Counter, pk)
    pause()
    counter.n += n
    session.commit()
'''


def fixed_source() -> str:
    src = FileSource("bump.py", RACY.encode())
    findings = analyze_source(RACY, None, "bump.py")
    assert [f.code for f in findings] == ["TXN106"]
    plan = FilePlan("bump.py", src, {f: fix_for(src, f) for f in findings})
    assert next(iter(plan.fixes.values())).applicability is Applicability.SAFE
    outcome = fixed(plan, unsafe_fixes=False)
    assert outcome.new is not None and "counter.n = Counter.n + n" in outcome.new
    return outcome.new


def load(source: str):
    module = types.ModuleType("bump_under_test")
    exec(compile(source, "bump.py", "exec"), module.__dict__)
    return module.bump


def value(engine) -> int:
    with Session(engine) as session:
        return session.get(Counter, 1).n


def _two_at_once(bump, engine) -> None:
    barrier = threading.Barrier(2, timeout=30)

    def request() -> None:
        with Session(engine) as session:
            bump(session, 1, 1, barrier.wait)
    threads = [threading.Thread(target=request) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


@pytest.mark.txnsafety_allow("the racy version is run on purpose")
def test_fixed_counter_stores_the_same_and_loses_nothing(fresh_db):
    engine = create_engine(fresh_db)
    try:
        racy, safe = load(RACY), load(fixed_source())
        with Session(engine) as session:
            racy(session, 1, 3, lambda: None)
            safe(session, 1, 4, lambda: None)
            assert session.get(Counter, 1).n == 7        # read after the commit: loaded again
        assert value(engine) == 7
        _two_at_once(racy, engine)
        assert value(engine) == 8                        # two increments, one lost
        _two_at_once(safe, engine)
        assert value(engine) == 10                       # two increments, none lost
    finally:
        engine.dispose()
