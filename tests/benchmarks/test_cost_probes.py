"""The cost probes run (bench_footprint.py, bench_parts.py, bench_django.py's sampler, where_time_goes.py,
the null control); compiled_checker reads figures.

Smoke tests, a few seconds: two rounds in one process, one contender served untimed as
valgrind runs it.  The Cython build itself is not run here (a compiler and a minute and
a half); what the script reads from the benchmarks' output is.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.compiled_checker import counted_shares, timed_shares  # noqa: E402
from benchmarks.count_instructions import TITLES, table_row  # noqa: E402


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_footprint.py"), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


def test_the_bare_padded_and_checked_requests_are_compared():
    done = _run("--processes", "1", "--rounds", "2", "--per-round", "1", "--pad", "5")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "overhead of padded: " in done.stdout and "overhead of checked: " in done.stdout, done.stdout


def test_each_contender_can_be_served_alone():
    for name in ("sqlalchemy", "padded", "checked"):
        done = _run("--loop", name, "--calls", "2")
        assert done.returncode == 0 and done.stdout == "", done.stdout + done.stderr


def test_the_checker_share_is_read_from_each_table_row_and_each_comparison():
    counted = "\n".join(["instructions per request (cachegrind, ...), SQLite", "  request   bare   checked ...",
                         table_row(TITLES["sqlalchemy-request"], [11.7e6, 11.8e6], [11.8e6, 12.0e6]),
                         table_row(TITLES["django-list"], [10.4e6, 10.4e6], [10.8e6, 10.8e6])])
    assert counted_shares(counted) == {TITLES["sqlalchemy-request"]: 1.27, TITLES["django-list"]: 3.85}
    timed = ("clock: CPU time of this thread; a forked child each\n"
             "process 1/4: WSGI request: checked +7.1 %; list endpoint: checked +2.0 %\n\n"
             "WSGI request: 20 reads + 5 writes (SQLAlchemy ORM)\n"
             "  contender   median\n"
             "overhead of checked: +6.5 % (median of 4 processes, range +4.6 to +7.1 %), over the 5 % target\n\n"
             "list endpoint: one select() of 200 rows\n"
             "overhead of checked: -0.4 % (median of 4 processes, range -1.0 to +5.5 %), within the 5 % target\n")
    assert timed_shares("bench_sqlalchemy.py", timed) == {
        "bench_sqlalchemy.py: WSGI request: 20 reads + 5 writes (SQLAlchemy ORM)": 6.5,
        "bench_sqlalchemy.py: list endpoint: one select() of 200 rows": -0.4}


def test_the_checked_request_is_timed_with_each_part_removed():
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_parts.py"), "--processes", "1",
                           "--rounds", "2", "--per-round", "1"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    for name in ("checked", "without lookups", "without writes", "without reads", "without detach",
                 "without all four", "middleware only"):
        assert f"overhead of {name}: " in done.stdout, done.stdout


def test_the_footprint_case_on_postgres_is_refused_naming_it():
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "count_instructions.py"), "--only", "footprint",
                           "--postgres", "postgresql://nobody@127.0.0.1/none"], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "footprint runs on SQLite only" in done.stderr, done.stderr


def test_the_django_benchmark_times_a_sampler_beside_the_sample_rate():
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_django.py"), "--processes", "1",
                           "--rounds", "2", "--per-round", "1"], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if "the same share decided by a SAMPLER: " in line]
    assert len(lines) == 2, done.stdout   # without other middleware, and with startproject's


def test_the_null_control_times_the_baseline_again_and_says_so():
    done = _run("--processes", "1", "--rounds", "2", "--per-round", "1", "--pad", "5", "--null-control")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "  sqlalchemy, again " in done.stdout, done.stdout
    assert "null control ('sqlalchemy, again': the baseline in a child of its own): " in done.stdout, done.stdout


def test_py_spy_samples_are_charged_to_the_checkers_own_lines():
    """A real py-spy run of the checked SQLAlchemy request: the checker's own lines get samples
    (its integration's modules among them), and the host gets most."""
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "where_time_goes.py"), "--calls", "300",
                           "--rate", "500", "--top", "40"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    shares = {match[1].strip(): float(match[2])
              for match in re.finditer(r"^  (the [^\n]*?) +(\d+\.\d+) % [±<]\d+\.\d+$", out, re.MULTILINE)}
    assert len(shares) == 3, out
    assert 0 < shares["the checker's own"] < 30 and shares["the host's"] > 50, out
    assert re.search(r"% ±\d+\.\d+ +[\d.]+ µs  sqlalchemy/(reads|events)\.py$", out, re.MULTILINE), out


def test_a_run_that_fails_is_an_error_not_shares_of_partial_data():
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "where_time_goes.py"), "--calls", "50",
                           "--postgres", "postgresql://nobody@127.0.0.1:1/none"], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "did not serve its 50 requests" in done.stderr and "Traceback" in done.stderr, done.stderr
    assert "the checker's own" not in done.stdout


def test_a_sample_below_a_host_frame_is_the_hosts_and_a_wrappers_call_of_the_original_is_apart():
    import json as stdlib_module
    from benchmarks.where_time_goes import PACKAGE, Owner, attribute, parse_frame
    reads = f"{PACKAGE}sqlalchemy/reads.py"
    lines = Path(reads).read_text().splitlines()
    original = next(i for i, text in enumerate(lines, 1) if "_original_instances(cursor, context)" in text)
    own = next(i for i, text in enumerate(lines, 1) if "session_state = session.info.get(INFO_KEY)" in text)
    loop = "serve_untimed (/b/_compare.py:1)"
    host = "instances (/site-packages/sqlalchemy/orm/loading.py:10)"
    stdlib = f"dumps ({stdlib_module.__file__}:231)"
    raw = [f"main (/b/x.py:1);{loop};_instances ({reads}:{own}) 3",
           f"main (/b/x.py:1);{loop};_instances ({reads}:{original}) 2",
           f"main (/b/x.py:1);{loop};_instances ({reads}:{original});{host} 5",
           f"main (/b/x.py:1);{loop};_instances ({reads}:{own});{stdlib} 13",
           f"main (/b/x.py:1);{loop};_warm_up (/b/_compare.py:2);_instances ({reads}:{own}) 7",
           f"main (/b/x.py:1);_instances ({reads}:{own}) 11"]
    result = attribute(raw)
    assert result.total == 23
    assert result.by_owner == {Owner.CHECKER: 16, Owner.THROUGH_WRAPPER: 2, Owner.HOST: 5}
    assert result.by_module == {"sqlalchemy/reads.py": 16}
    odd = parse_frame("serve_untimed (/tmp/a review (x)/t (1).py:10)")
    assert (odd.function, odd.path, odd.line) == ("serve_untimed", "/tmp/a review (x)/t (1).py", 10)
    assert parse_frame("f.<locals>.<lambda> (/x/y.py)").line == 0


def test_a_share_carries_its_sampling_error():
    from benchmarks.where_time_goes import share_text
    assert share_text(7, 3407) == "  0.21 % ±0.15"   # 7 samples: not a cost to read
    assert share_text(270, 6115) == "  4.42 % ±0.51"
    assert share_text(0, 3000) == "  0.00 % <0.10"   # none seen: at most 3 in 3,000 (95 %)


def test_each_write_judgement_is_timed_by_its_place_in_the_request():
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "cold_calls.py"), "--requests", "12",
                           "--skip", "2"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    for title in ("SQLAlchemy request", "Django request"):
        section = done.stdout.split(title, 1)[1]
        places = re.findall(r"call (\d): +(\d+\.\d+) us", section)[:5]
        assert [int(place) for place, _ in places] == [1, 2, 3, 4, 5], done.stdout   # five writes a request
        assert all(float(us) > 0 for _, us in places)
        assert re.search(r"the first call / the median of the others: \d+\.\dx", section), done.stdout


def test_a_place_is_timed_per_request_and_the_warm_up_left_out():
    from benchmarks.cold_calls import Places, report
    places = Places()
    calls = []
    hook = places.timed(lambda x: calls.append(x) or x)
    for request in range(3):
        places.place = 0
        assert hook(request) == request and hook(request) == request   # two calls a request, values passed on
    assert calls == [0, 0, 1, 1, 2, 2]
    assert sorted(places.times) == [0, 1] and all(len(v) == 3 for v in places.times.values())
    assert sorted(places.medians_us(skip=1)) == [0, 1]
    assert places.medians_us(skip=3) == {}
    try:
        report("nothing", {})
    except SystemExit as stop:
        assert "no call of nothing was timed" in str(stop)
    else:
        raise AssertionError("an empty timing must be an error")


def test_each_state_of_the_one_row_accessor_is_served():
    """count_one_row.py: bare, wrapped and replaced each serve their calls (valgrind counts them)."""
    for state in ("bare", "wrapped", "replaced"):
        done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "count_one_row.py"), "--serve", state, "3"],
                              cwd=REPO, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and done.stdout == "", done.stdout + done.stderr
