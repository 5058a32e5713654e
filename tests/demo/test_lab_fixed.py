"""The stomp lab's racy handlers after ``txnsafety lint --fix --unsafe-fixes``, under the
lab's own load, on SQLite and PostgreSQL (issue 32's stomp-lab proof).

The handlers' file is fixed as the command fixes it (each fix checked by the linter), the
fixed module is loaded in the lab's package, and every racy handler that got a fix runs the
way ``test_lab.py`` runs the racy ones: N requests held at a barrier between the read and
the write, so that the racy version loses N-1 writes for certain.  The fixed one must lose
none, and the runtime checker must report nothing.  The classes with no fix (half-protected:
the row comes from a helper; internal; check-then-act on a count) are named, so a fix that
appears or disappears shows here."""
from __future__ import annotations

import ast
import threading
import types

import pytest

from txnsafety_lab import endpoints
from txnsafety_lab.catalog import CLASSES
from txnsafety_lint.analysis import analyze_source
from txnsafety_lint.facts.config import Config
from txnsafety_lint.fix.apply import fixed
from txnsafety_lint.fix.plan import plan_file
from txnsafety_lint.fixing import rechecker
from txnsafety_lint.report.identity import with_functions

from .test_lab import N, damage, run_concurrently

#: the racy handlers --fix rewrites (both counters: TXN106, classes unprotected and weak isolation)
FIXED = ("top_up_racy", "sell_item_racy")


def fixed_endpoints() -> tuple[types.ModuleType, set[str]]:
    """The handlers' module as ``--fix --unsafe-fixes`` leaves it, and the handlers fixed."""
    path = endpoints.__file__
    with open(path, encoding="utf-8") as fh:
        source = fh.read()
    findings = with_functions(analyze_source(source, Config(), path), ast.parse(source))
    plan = plan_file(path, findings, rechecker(Config()))
    outcome = fixed(plan, unsafe_fixes=True)
    assert outcome.new is not None and not outcome.problem
    done = {f.function for f, fix in plan.fixes.items() if any(fix is a for a in outcome.applied)}
    module = types.ModuleType("txnsafety_lab.endpoints_fixed")
    module.__package__ = "txnsafety_lab"
    exec(compile(outcome.new, path, "exec"), module.__dict__)
    return module, done


def test_the_fixes_reach_the_counter_classes_only():
    _module, done = fixed_endpoints()
    assert done == set(FIXED)


@pytest.mark.parametrize("slug", [c.slug for c in CLASSES if c.racy.function in FIXED])
def test_fixed_racy_handler_loses_nothing_under_the_lab_load(lab, slug, txnsafety_violations):
    stomp_class = next(c for c in CLASSES if c.slug == slug)
    module, _done = fixed_endpoints()
    handler = getattr(module, stomp_class.racy.function)
    barrier = threading.Barrier(N)
    lab.pause_hook = lambda: barrier.wait(30)      # every request reads before any writes
    assert run_concurrently(lab, handler) == []
    assert damage(lab, stomp_class.racy) == 0, f"{slug}: the fixed handler lost writes"
    assert txnsafety_violations == []
