"""The proof a fix is more than a diff, on every eval file and every docs example that gets
one: after the fixes the file parses, the findings fixed are no longer reported (and no new
one appears), and fixing again changes nothing.

The fixes are applied as ``--fix --unsafe-fixes`` applies them (non-overlapping fixes per
pass, the file analysed again between passes), each file under its own eval settings."""
from __future__ import annotations

import ast
import collections

import pytest

from txnsafety_lint.analysis import analyze_source
from txnsafety_lint.facts.config import Config
from txnsafety_lint.fix.apply import fixed
from txnsafety_lint.fix.model import Applicability
from txnsafety_lint.fix.plan import FilePlan, fix_for, parses
from txnsafety_lint.fix.source import FileSource
from txnsafety_lint.fixing import rechecker
from txnsafety_lint.report.identity import with_functions

from .helpers import fixture_config, fixture_files
from .test_docs import DOCS, as_function, sections

FILES = fixture_files()


def findings_of(text: str, cfg: Config):
    return with_functions(analyze_source(text, cfg, "m.py"), ast.parse(text))


def one_pass(text: str, cfg: Config):
    """(new text, the findings whose fixes were applied) of one ``--fix --unsafe-fixes`` pass."""
    src = FileSource("m.py", text.encode("utf-8"))
    found = findings_of(text, cfg)
    plan = FilePlan("m.py", src, {f: fix_for(src, f, rechecker(cfg)) for f in found})
    outcome = fixed(plan, unsafe_fixes=True)
    assert not outcome.problem, outcome.problem
    done = [f for f, fix in plan.fixes.items() if any(fix is a for a in outcome.applied)]
    PROVED.update(fix.kind for fix in outcome.applied)
    return (outcome.new if outcome.new is not None else text), done


#: the fixers whose fixes the proofs applied (the last test looks here)
PROVED: set = set()


def prove(text: str, cfg: Config) -> int:
    """Fix ``text`` to the end and check the three proofs; the number of fixes applied."""
    before = collections.Counter((f.code, f.function) for f in findings_of(text, cfg))
    expected = collections.Counter(before)
    applied = 0
    for _ in range(10):
        new, done = one_pass(text, cfg)
        if new == text:
            break
        assert parses(new), new
        expected -= collections.Counter((f.code, f.function) for f in done)
        applied += len(done)
        text = new
    after = collections.Counter((f.code, f.function) for f in findings_of(text, cfg))
    # no finding a fix applied to remains, and no new one appears (a fix may settle another
    # finding of the same lines: a counter made atomic also ends a TXN103 on it)
    assert not after - expected, f"left {after}, expected at most {expected}\n{text}"
    again, done = one_pass(text, cfg)
    assert again == text and not done
    return applied


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_eval_file_fixes_parse_silence_their_findings_and_are_idempotent(path):
    source = path.read_text(encoding="utf-8")
    prove(source, fixture_config(source))


def _doc_examples():
    for page in sorted(DOCS.glob("TXN*.md")):
        parts = sections(page.read_text())
        for i, snippet in enumerate(parts.get("Bad", [])):
            yield pytest.param(as_function(snippet), id=f"{page.stem}-bad{i}")
        for i, snippet in enumerate(parts.get("Automatic fix", [])[::2]):    # each pair's "before"
            yield pytest.param(as_function(snippet), id=f"{page.stem}-fix{i}")


@pytest.mark.parametrize("source", list(_doc_examples()))
def test_docs_bad_examples_fix_the_same_way(source):
    cfg = Config().update({"enable": ["TXN109"], "gets": ["get_user"]})
    prove(source, cfg)


def test_the_eval_files_have_safe_fixes_for_counters_and_locks():
    """The fixes reach the codes they are for (a fixer that silently gave up would pass the
    proofs above with nothing applied)."""
    counts = collections.Counter()
    for path in FILES:
        source = path.read_text(encoding="utf-8")
        src = FileSource(str(path), source.encode("utf-8"))
        for f in analyze_source(source, fixture_config(source), str(path)):
            counts[f.code, fix_for(src, f, rechecker(fixture_config(source))).applicability] += 1
    assert counts["TXN106", Applicability.SAFE] >= 10
    assert counts["TXN108", Applicability.SAFE] >= 3
    assert counts["TXN102", Applicability.UNSAFE] >= 5


def test_a_fix_that_would_bring_a_new_finding_is_refused():
    """Two sessions read one row; locking the second read (``with_for_update``) would leave
    a write the linter reports as TXN104: the check refuses that fix."""
    path = [p for p in FILES if p.name == "sqlalchemy_txn103.py"][0]
    source = path.read_text(encoding="utf-8")
    src = FileSource(str(path), source.encode("utf-8"))
    finding = next(f for f in findings_of(source, Config()) if f.code == "TXN102"
                   and f.function == "bad_two_sessions" and f.line == 14)
    assert fix_for(src, finding).applicability is Applicability.UNSAFE       # unchecked
    assert fix_for(src, finding, rechecker(Config())).applicability is Applicability.NONE


def test_the_docs_proofs_apply_every_fixer():
    """A fixer that silently gave up everywhere would pass the proofs with nothing applied:
    each one's rewrite is applied and proved on at least one docs example."""
    PROVED.clear()
    cfg = Config().update({"enable": ["TXN109"], "gets": ["get_user"]})
    for param in _doc_examples():
        prove(param.values[0], cfg)
    assert PROVED >= {"counters", "lock_scope", "locked_read", "exists_create", "sqla_insert", "user_lock"}
