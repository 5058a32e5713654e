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
import functools
import shutil
import threading
import types
from pathlib import Path

import pytest
from sqlalchemy import text

from txnsafety_lab import endpoints
from txnsafety_lab.catalog import CLASSES, find
from txnsafety_lint.analysis import analyze_source
from txnsafety_lint.facts.config import Config
from txnsafety_lint.fix.apply import fixed
from txnsafety_lint.fix.edits import apply_edits
from txnsafety_lint.fix.model import Applicability
from txnsafety_lint.fix.source import FileSource
from txnsafety_lint.fix.user_lock import user_lock_fix
from txnsafety_lint.fix.plan import plan_file
from txnsafety_lint.fixing import rechecker
from txnsafety_lint.report.identity import with_functions
from txnsafety_lint.runner import lint_paths
from txnsafety_lint.selection.roles import QuietGroup
from txnsafety_lint.selection.settings import load_settings

from .test_lab import N, damage, run_concurrently, stored

#: the racy handlers --fix rewrites (both counters: TXN106, classes unprotected and weak isolation)
FIXED = ("top_up_racy", "sell_item_racy")
#: a twin the linter reports (a counter in an optimistic retry loop) that gets the user write
#: lock, the module taking it already: harmless around a versioned write, named so it shows
ALSO_FIXED = ("sell_item_versioned",)


def fixed_endpoints(path: str = endpoints.__file__) -> tuple[types.ModuleType, set[str], list[str]]:
    """The handlers' module at ``path`` as ``--fix --unsafe-fixes`` leaves it (loaded in the
    lab's package), the handlers fixed, and the fixes' notes."""
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
    return module, done, [fix.note for fix in outcome.applied if fix.note]


def test_the_fixes_reach_the_counter_classes_only():
    _module, done, _notes = fixed_endpoints()
    assert done == set(FIXED) | set(ALSO_FIXED)


@pytest.mark.parametrize("slug", [c.slug for c in CLASSES if c.racy.function in FIXED])
def test_fixed_racy_handler_loses_nothing_under_the_lab_load(lab, slug, txnsafety_violations):
    stomp_class = next(c for c in CLASSES if c.slug == slug)
    module, _done, _notes = fixed_endpoints()
    handler = getattr(module, stomp_class.racy.function)
    barrier = threading.Barrier(N)
    lab.pause_hook = lambda: barrier.wait(30)      # every request reads before any writes
    assert run_concurrently(lab, handler) == []
    assert damage(lab, stomp_class.racy) == 0, f"{slug}: the fixed handler lost writes"
    assert txnsafety_violations == []


def one_database_copy(tmp_path: Path, lab_url: str) -> str:
    """The lab's handlers and models copied into a project that runs on the lab's database
    alone (its settings name that URL, as an app's do); the copied handlers' path."""
    package = tmp_path / "shop" / "txnsafety_lab"
    package.mkdir(parents=True)
    (tmp_path / "shop" / "pyproject.toml").write_text("[project]\nname = \"shop\"\n")
    (package / "__init__.py").write_text("")
    here = Path(endpoints.__file__).parent
    for name in ("endpoints.py", "models.py"):
        shutil.copy(here / name, package / name)
    scheme = "sqlite" if lab_url.startswith("sqlite") else "postgresql"
    (package / "settings.py").write_text(f'DATABASE_URL = "{scheme}://shop"\n')
    return str(package / "endpoints.py")


def test_check_then_act_fixed_by_the_insert_makes_no_duplicate(lab, lab_url, tmp_path, txnsafety_violations):
    racy = find("check-then-act").racy
    barrier = threading.Barrier(N)
    lab.pause_hook = lambda: barrier.wait(30)
    assert run_concurrently(lab, racy.handler) == []
    assert damage(lab, racy) == N - 1                    # before: every request inserted
    reported = len(txnsafety_violations.codes())

    module, done, notes = fixed_endpoints(one_database_copy(tmp_path, lab_url))
    assert "redeem_voucher_racy" in done
    (note,) = [n for n in notes if "UniqueConstraint" in n]
    assert 'UniqueConstraint("user_id", "code", name="uq_redemption_user_id_code")' in note
    lab.reset()
    with lab.measure.begin() as connection:               # what the note asks the user to add
        connection.execute(text("CREATE UNIQUE INDEX uq_redemption_user_id_code "
                                "ON lab_redemption (user_id, code)"))
    for engine in lab.engines:          # as after a migration: SQLite connections keep the old schema
        engine.dispose()
    try:
        barrier = threading.Barrier(N)
        lab.pause_hook = lambda: barrier.wait(30)         # every request past the old check
        assert run_concurrently(lab, module.redeem_voucher_racy) == []
        assert damage(lab, racy) == 0, "the fixed handler made duplicates"
        assert stored(lab, racy) == 1
    finally:
        with lab.measure.begin() as connection:
            connection.execute(text("DROP INDEX uq_redemption_user_id_code"))
    assert len(txnsafety_violations.codes()) == reported  # the checker saw no check-then-act


def test_the_lab_itself_gets_no_insert_fix_it_runs_on_either_database():
    src_path = endpoints.__file__
    with open(src_path, encoding="utf-8") as fh:
        source = fh.read()
    findings = with_functions(analyze_source(source, Config(), src_path), ast.parse(source))
    plan = plan_file(src_path, findings, rechecker(Config()))
    (fix,) = [fix for f, fix in plan.fixes.items() if f.function == "redeem_voucher_racy"]
    assert fix.applicability is Applicability.NONE and "both postgresql and sqlite" in fix.description


@functools.lru_cache(maxsize=1)
def project_findings() -> tuple:
    """The handlers' findings as ``txnsafety lint`` reports them inside the project (the
    models' policies known: ``Balance`` is declared ``@written_with_user_lock``)."""
    root = Path(__file__).resolve().parents[2]
    settings = load_settings(str(root))
    settings.include.update(QuietGroup)
    run = lint_paths([endpoints.__file__], settings, cache=False)
    source = Path(endpoints.__file__).read_text(encoding="utf-8")
    return tuple(with_functions(run.findings, ast.parse(source)))


def test_unprotected_held_under_the_user_write_lock_loses_nothing(lab, txnsafety_violations):
    """The user-write-lock fix (unsafe) on the unprotected class's handler, applied alone (a
    full run gives that counter the atomic update first): it takes the lock the model's policy
    names, from the read to the commit, and the runtime checker, which compares that lock,
    reports nothing."""
    racy = find("unprotected").racy
    barrier = threading.Barrier(N)
    lab.pause_hook = lambda: barrier.wait(30)
    assert run_concurrently(lab, racy.handler) == []
    assert damage(lab, racy) == N - 1                    # before: N-1 top-ups lost
    reported = len(txnsafety_violations.codes())

    finding = next(f for f in project_findings() if f.function == "top_up_racy")
    src = FileSource.read(endpoints.__file__)
    fix = user_lock_fix(src, finding)
    assert fix is not None and fix.applicability is Applicability.UNSAFE
    assert 'user_write_lock(f"user:{user_id}")' in fix.description and "policy names" in fix.note
    module = types.ModuleType("txnsafety_lab.endpoints_locked")
    module.__package__ = "txnsafety_lab"
    exec(compile(apply_edits(src.text, fix.edits), endpoints.__file__, "exec"), module.__dict__)
    lab.reset()
    lab.pause_hook = None
    lab.think = 0.003                   # the lock serialises them: real overlap, as test_lab's twins
    assert run_concurrently(lab, module.top_up_racy) == []
    assert damage(lab, racy) == 0, "the handler under the lock lost top-ups"
    assert len(txnsafety_violations.codes()) == reported
