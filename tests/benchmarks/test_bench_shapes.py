"""benchmarks/bench_shapes.py and bench_shapes_django.py: issue 33's request shapes stay benchmarked.

A shape cannot silently leave the benchmarks: the lists below are the ones issue 33 asks for,
and each shape must be served by its script in every state (bare, installed but off,
checked, a tenth checked), counted by ``count_instructions.py`` and given figures in
``docs/performance.md``.  Then a smoke run: one round of every shape (the scripts themselves
fail if the checker reports anything: the requests are safe).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = str(REPO / "benchmarks" / "bench_shapes.py")
DJANGO_SCRIPT = str(REPO / "benchmarks" / "bench_shapes_django.py")
sys.path.insert(0, str(REPO))

from benchmarks.count_instructions import CASES, TITLES, contender_of  # noqa: E402

#: issue 33: session.get()-heavy requests (SQLAlchemy 2.x and Flask-SQLAlchemy), select() + scalars(),
#: Query.filter_by().first(), async (AsyncSession).
SHAPES = ["get", "flask-get", "scalars", "filter-by-first", "async-get"]
STATES = ["bare", "off", "checked", "sampled"]
#: issue 33: Django get()/filter() loops, a 200-row list, a Django async view.
DJANGO_SHAPES = ["django-get", "django-filter-first", "django-list", "django-async"]
DJANGO_STATES = STATES


def _run(*args: str, script: str = SCRIPT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, script, *args], cwd=REPO, capture_output=True, text=True, timeout=600)


def test_every_shape_is_served_in_every_state():
    done = _run("--list")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"{shape}:{state}" for shape in SHAPES for state in STATES]
    done = _run("--list", script=DJANGO_SCRIPT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"{shape}:{state}" for shape in DJANGO_SHAPES for state in DJANGO_STATES]


def test_every_shape_is_counted_by_count_instructions():
    counted = {case.name: case for case in CASES if case.script in ("bench_shapes.py", "bench_shapes_django.py")}
    assert sorted(counted) == sorted(f"shape-{shape}" for shape in SHAPES + DJANGO_SHAPES)
    for shape in SHAPES + DJANGO_SHAPES:
        case = counted[f"shape-{shape}"]
        assert (case.bare, case.checked, case.default, case.postgres) == (f"{shape}:bare", f"{shape}:checked",
                                                                          True, True)
        assert case.name in TITLES


def test_every_state_count_instructions_asks_for_is_a_contender_the_script_serves():
    """``--state off|left-out|tenth`` of a shape or a list case names a contender its script
    lists (``get:off``, ``sqlalchemy sampled``); the two whole-request cases have none."""
    served: dict[str, list[str]] = {}
    for case in CASES:
        if case.name == "footprint":
            continue
        states = [contender_of(case, state) for state in ("checked", "off", "left-out", "tenth")]
        if case.name in ("sqlalchemy-request", "django-request"):
            assert states[1:] == [None, None, None], case
            continue
        if case.script not in served:
            done = _run("--list", script=str(REPO / "benchmarks" / case.script))
            assert done.returncode == 0, done.stderr
            served[case.script] = done.stdout.splitlines()
        assert all(name in served[case.script] for name in states), (case, states)


def test_every_shape_has_figures_in_the_performance_notes():
    notes = (REPO / "docs" / "performance.md").read_text()
    section = notes.split("## Tenth round", 1)[1].split("\n## ", 1)[0]
    for shape in SHAPES + DJANGO_SHAPES:
        assert f"| `{shape}` |" in section, shape


def test_one_round_of_every_shape_runs_and_reports_each_figure():
    done = _run("--processes", "1", "--rounds", "1", "--per-round", "1", "--in-process")
    assert done.returncode == 0, done.stdout + done.stderr
    for shape in SHAPES:
        line = next(line for line in done.stdout.splitlines() if line.strip().startswith(f"{shape}: checked"))
        assert "sampled" in line and "off" in line, done.stdout


def test_one_round_of_every_django_shape_runs_and_reports_each_figure():
    done = _run("--processes", "1", "--rounds", "1", "--per-round", "1", "--in-process", script=DJANGO_SCRIPT)
    assert done.returncode == 0, done.stdout + done.stderr
    for shape in DJANGO_SHAPES:
        line = next(line for line in done.stdout.splitlines() if line.strip().startswith(f"{shape}: checked"))
        assert "sampled" in line and "off" in line, done.stdout


def test_a_contender_can_be_served_alone():
    done = _run("--loop", "async-get:checked", "--calls", "2")
    assert done.returncode == 0 and done.stdout == "", done.stdout + done.stderr
    done = _run("--loop", "django-async:checked", "--calls", "2", script=DJANGO_SCRIPT)
    assert done.returncode == 0 and done.stdout == "", done.stdout + done.stderr


def test_every_python_frame_is_counted_against_the_bare_request():
    """``count_checker_bytecodes.py --everything``: the bare request runs no checker frame but the
    ``BEGIN`` listener of ``sqlite_transactions`` (the app's own recipe), and the checker
    installed but off adds to the libraries' frames (its hooks' returns)."""
    script = str(REPO / "benchmarks" / "count_checker_bytecodes.py")
    out = {}
    for state, everything in (("bare", True), ("off", True), ("bare", False)):
        done = _run("--shape", "get", "--state", state, "--calls", "3", "--top", "5",
                    *(["--everything"] if everything else []), script=script)
        assert done.returncode == 0, done.stdout + done.stderr
        out[state, everything] = done.stdout.splitlines()
    assert [line.split()[-1] for line in out["bare", False][1:]] == ["isolation.py:_begin"]
    total = {state: int(out[state, True][0].split(" Python bytecodes")[0].split()[-1]) for state in ("bare", "off")}
    assert total["off"] > total["bare"] > 10_000
