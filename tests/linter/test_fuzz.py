"""Generated programs go through the analysis without a crash.

Two sources: hypothesmith's grammar-based programs (arbitrary Python, analysed with the
prefilter forced open so every function reaches the libcst stage), and programs built
from the linter's own vocabulary (reads, mutations, writes, transactions, locks, checks,
nested functions) so the dataflow paths are exercised, not only the parser.
"""
from __future__ import annotations

import ast
import collections
import os
import warnings

import hypothesmith
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from txnsafety_lint.analysis import RULES, ModuleAnalyzer, Prefilter, analyze_project
from txnsafety_lint.project.callers import quiet_functions
from txnsafety_lint.facts.config import Config
from txnsafety_lint.flake8_plugin import Plugin
from txnsafety_lint.selection.roles import classify

pytestmark = pytest.mark.filterwarnings("ignore::SyntaxWarning")


class OpenPrefilter(Prefilter):
    def module_relevant(self, text):
        return True

    def function_relevant(self, text):
        return True


CFG = Config().update({"enable": ["TXN109"], "side-effects-in-any-transaction": True})
PREFILTER = OpenPrefilter(CFG)
#: ``benchmarks/fuzz_linter.py`` runs these tests with many more examples
SCALE = int(os.environ.get("TXNSAFETY_FUZZ_SCALE", "1"))
#: programs analysed, by source (the benchmark prints them)
RUNS: collections.Counter = collections.Counter()
FUZZ = settings(max_examples=50 * SCALE, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                       HealthCheck.data_too_large])


def analyse(source: str) -> None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        RUNS["not Python"] += 1
        return
    RUNS["analysed"] += 1
    findings = ModuleAnalyzer(source, tree, CFG, "fuzz.py", PREFILTER, RULES).run()
    for f in findings:
        assert f.line >= 1 and f.message.startswith(f.code)


@FUZZ
@given(hypothesmith.from_grammar())
def test_grammar_programs(source):
    analyse(source)


@settings(FUZZ, max_examples=20 * SCALE)
@given(hypothesmith.from_node())
def test_node_programs(source):
    analyse(source)


NAMES = st.sampled_from(["a", "b", "user", "acct"])
GETS = st.sampled_from([
    "M.objects.get(pk=k)", "M.objects.select_for_update().get(pk=k)",
    "M.objects.filter(k=k).first()", "session.get(M, k)", "session.get(M, k, with_for_update=True)",
    "session.execute(select(M).where(M.id == k).with_for_update()).scalar_one()",
    "M.query.get(k)", "key.get()", "M.get_by_id(k)", "fetch_under_lock(a)", "get_object_or_404(M, pk=k)",
])
SCOPES = st.sampled_from(["transaction.atomic()", "user_write_lock(k)", "session.begin()",
                          "r.lock('k')", "ndb.transaction(f)", "open('x')"])
DECOS = st.sampled_from(["", "@transaction.atomic\n", "@ndb.transactional()\n", "@other\n"])


def _stmt(depth):
    simple = st.one_of(
        st.builds(lambda n, g: f"{n} = {g}", NAMES, GETS),
        st.builds(lambda n: f"{n}.count += 1", NAMES),
        st.builds(lambda n: f"{n}.count = {n}.count + 1", NAMES),
        st.builds(lambda n: f"{n}.name = {n}.name.strip()", NAMES),
        st.builds(lambda n: f"{n}.name = 'x'", NAMES),
        st.builds(lambda n: f"{n}.count = F('count') + 1", NAMES),
        st.builds(lambda n: f"{n}.save()", NAMES),
        st.builds(lambda n: f"{n}.save(update_fields=['name'])", NAMES),
        st.builds(lambda n: f"{n}.put()", NAMES),
        st.builds(lambda n: f"helper({n})", NAMES),
        st.builds(lambda n: f"{n}.refresh_from_db()", NAMES),
        st.just("session.commit()"), st.just("session.flush()"),
        st.just("M.objects.create(k=k)"), st.just("session.add(M(k=k))"),
        st.just("send_mail('s', 'b', 'f', ['t'])"), st.just("task.delay(1)"),
        st.just("return a"), st.just("pass"),
    )
    if depth <= 0:
        return simple.map(lambda s: [s])
    inner = st.lists(_stmt(depth - 1), min_size=1, max_size=4).map(
        lambda blocks: [line for b in blocks for line in b])
    indent = lambda lines: ["    " + line for line in lines]  # noqa: E731
    return st.one_of(
        simple.map(lambda s: [s]),
        st.builds(lambda s, body: [f"with {s}:"] + indent(body), SCOPES, inner),
        st.builds(lambda body: ["if not M.objects.filter(k=k).exists():"] + indent(body), inner),
        st.builds(lambda n, body: [f"if {n}.balance < 10:"] + indent(body), NAMES, inner),
        st.builds(lambda body: ["try:"] + indent(body) + ["except M.DoesNotExist:"] + indent(body),
                  inner),
        st.builds(lambda body: ["for a in M.objects.filter(k=k):"] + indent(body), inner),
        st.builds(lambda d, body: [d + "def inner():"] + indent(body) if not d else
                  [d.strip(), "def inner():"] + indent(body), DECOS, inner),
    )


PROGRAMS = st.builds(
    lambda funcs: "from django.db import transaction\nimport sqlalchemy\n\n" + "\n".join(funcs),
    st.lists(st.builds(
        lambda deco, name, body: (deco + f"def {name}(a, k):\n" +
                                  "\n".join("    " + line for line in body) + "\n"),
        DECOS, st.sampled_from(["helper", "view", "task", "f"]),
        st.lists(_stmt(2), min_size=1, max_size=6).map(lambda bs: [x for b in bs for x in b])),
        min_size=1, max_size=3),
)


@settings(max_examples=150 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PROGRAMS)
def test_vocabulary_programs(source):
    analyse(source)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tree = ast.parse(source)
    list(Plugin(tree, "fuzz.py", source.splitlines(True)).run())


@settings(max_examples=30 * SCALE, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(PROGRAMS, min_size=2, max_size=4))
def test_vocabulary_projects(sources):
    """Several generated modules as one project: imports across them, helpers and their
    callers, the call-graph summary of quiet callers."""
    files = []
    for i, source in enumerate(sources):
        path = ("app/tests/test_m.py" if i == 0 else f"app/m{i}.py")
        text = source + f"\nfrom app.m{(i + 1) % len(sources)} import helper, view\n"
        files.append((path, text, ast.parse(text)))
    RUNS["projects"] += 1
    found = analyze_project(files, CFG, ["."])
    quiet_functions([(p, t) for p, _s, t in files], {p: classify(p) for p, _s, _t in files})
    for path, findings in found.items():
        assert all(f.line >= 1 and f.message.startswith(f.code) for f in findings), path
