"""``txnsafety demo`` end to end, as a user runs it: a subprocess, real servers, its report files.

The run itself is timing-dependent only in how many writes the concurrent racy
endpoints lose; the assertions stick to what must hold every time: every racy
request is reported (the checker judges provenance, not luck), the internal
stomp loses every bonus, every fixed twin loses nothing and is reported by no
one, and the exit status says so.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from txnsafety_lab.catalog import CLASSES

from .conftest import REQUESTS, run_demo


def test_default_run_passes_and_prints_the_three_steps(demo_run):
    result, data, _ = demo_run
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    out = result.stdout
    assert "Step 1. The linter" in out and "Steps 2 and 3" in out
    assert "OK: every fixed twin kept every write" in out
    for stomp_class in CLASSES:
        assert stomp_class.slug in out
    assert data["verdict"] == {"ok": True, "problems": [], "notes": data["verdict"]["notes"]}


def test_every_racy_request_is_reported_and_no_fixed_one(demo_run):
    _, data, _ = demo_run
    for stomp_class in data["classes"]:
        for variant in stomp_class["variants"]:
            for server in ("wsgi", "asgi"):
                result = variant["results"][server]
                assert result["requests"] == REQUESTS and result["failed"] == 0
                if not variant["racy"]:
                    assert result["damage"] == 0 and result["reports"] == {}, (stomp_class["slug"], variant)
                elif stomp_class["code"] != "TXN105":
                    assert result["reports"] == {stomp_class["code"]: REQUESTS}, (stomp_class["slug"], server)
                else:  # reported for each request that found no redemption and inserted one
                    assert set(result["reports"]) == {"TXN105"}, (stomp_class["slug"], server)
                    assert result["reports"]["TXN105"] > result["damage"], (stomp_class["slug"], server)


def test_internal_stomp_loses_every_bonus(demo_run):
    _, data, _ = demo_run
    internal = next(c for c in data["classes"] if c["code"] == "TXN103")
    for server in ("wsgi", "asgi"):
        assert internal["variants"][0]["results"][server]["damage"] == REQUESTS


def test_static_findings_land_on_racy_handlers_only(demo_run):
    _, data, _ = demo_run
    static = {c["slug"]: [v["static"] for v in c["variants"]] for c in data["classes"]}
    assert static == {
        "half-protected": [["TXN101"], []],
        "unprotected": [["TXN106"], []],      # a numeric read-modify-write: the linter's specific code
        "internal": [["TXN103"], []],
        "weak-isolation": [["TXN106"], [], []],
        "check-then-act": [["TXN105"], []],
    }


def test_each_report_has_sites_and_the_race_behind_it(demo_run):
    _, data, _ = demo_run
    assert {r["code"] for r in data["reports"]} == {"TXN101", "TXN102", "TXN103", "TXN105", "TXN109"}
    # a check-then-act is reported whether or not a duplicate happened (the check is what is
    # judged); its picture has a second request only when one inserted in between, which the
    # run's damage says (a loaded machine may serialize the requests of a whole run)
    duplicated = {(c["slug"], server) for c in data["classes"]
                  for server, result in c["variants"][0]["results"].items() if result["damage"]}
    for report in data["reports"]:
        assert "endpoints.py:" in report["write_site"] and "endpoints.py:" in report["read_site"]
        lanes = report["timeline"]
        if report["code"] == "TXN105" and (report["class_slug"], report["server"]) not in duplicated:
            assert len(lanes) == 1, report          # the reported request alone: nothing raced it
            continue
        assert len(lanes) == 2, report
        ops = [e["op"] for lane in lanes for e in lane["events"]]
        assert "write" in ops and ("read" in ops or report["code"] == "TXN105")  # a count reads no row
        if report["code"] == "TXN103":
            assert lanes[0]["request_id"] == lanes[1]["request_id"] == report["request_id"]
        else:
            assert lanes[0]["request_id"] == report["request_id"] != lanes[1]["request_id"]


def test_report_never_contains_a_stored_value(demo_run):
    """Store credit starts at a sentinel (98,765,400 cents): no value of it may reach the report."""
    _, data, report_dir = demo_run
    from txnsafety_lab.models import STARTING_CENTS
    sentinel = str(STARTING_CENTS)[:6]
    for name in ("report.json", "report.html"):
        assert sentinel not in (report_dir / name).read_text(), name
    top_ups = next(c for c in data["classes"] if c["code"] == "TXN102")["variants"][1]["results"]["asgi"]
    assert top_ups["stored"] == top_ups["expected"] == 100 * REQUESTS   # measured relative to the start


def test_sites_in_the_report_are_portable(demo_run):
    _, data, _ = demo_run
    for report in data["reports"]:
        assert report["write_site"].startswith("txnsafety_lab/endpoints.py:"), report["write_site"]


@pytest.mark.parametrize("args,message", [
    (["--requests", "0"], "--requests must be at least 1"),
    (["--servers", "gunicorn"], "--servers takes wsgi, asgi or both"),
    (["--database", "mysql://localhost/x"], "SQLite or PostgreSQL"),
    (["--database", "postgresql://nobody:pw@127.0.0.1:9/none"], "cannot open the database"),
    (["--locks", "zookeeper://127.0.0.1"], "cannot use the lock backend"),
    (["--locks", "redis://:sekret@127.0.0.1:9/0"], "cannot use the lock backend redis://:***@127.0.0.1:9/0"),
    (["--think-ms", "nan"], "--think-ms must be a number from 0 to 1000"),
    (["--report-dir", "/proc/no/such/dir"], "--report-dir /proc/no/such/dir"),
])
def test_bad_options_get_a_clear_error_and_no_traceback(tmp_path, args, message):
    result = run_demo(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert ":pw@" not in result.stderr and "sekret" not in result.stderr  # passwords are not echoed


def test_real_servers_postgresql_database_and_redis_locks(tmp_path, postgres_url, redis_url):
    result = run_demo("--requests", "6", "--concurrency", "3", "--servers", "wsgi",
                      "--database", postgres_url, "--locks", redis_url, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads((tmp_path / "txnsafety-demo-report" / "report.json").read_text())
    assert data["database"].startswith("postgresql://txnsafety:***@127.0.0.1")  # password hidden
    assert data["locks"] == redis_url and data["servers"] == ["wsgi"]


@pytest.mark.parametrize("backend", ["memcached", "postgresql"])
def test_real_lock_backends(tmp_path, backend, request):
    locks = request.getfixturevalue(f"{'postgres' if backend == 'postgresql' else backend}_url")
    result = run_demo("--requests", "6", "--concurrency", "3", "--servers", "asgi", "--locks", locks,
                      cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads((tmp_path / "txnsafety-demo-report" / "report.json").read_text())
    assert data["locks"].split("://")[0] == locks.split("://")[0]
    for slug in ("unprotected", "internal"):  # the two classes whose cure or handler takes the user lock
        for variant in next(c for c in data["classes"] if c["slug"] == slug)["variants"]:
            assert variant["results"]["asgi"]["failed"] == 0
            assert variant["racy"] or variant["results"]["asgi"]["damage"] == 0


def _sigint_as_at_a_terminal() -> None:
    """In the child: SIGINT's default action, as a shell with job control gives a command.  A
    shell without it (``cmd &`` in a script, as a CI runner may start the suite) starts its
    background jobs with SIGINT ignored, their children inherit that, and Python then
    installs no KeyboardInterrupt handler: Ctrl-C would not reach the demo at all."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_ends_the_run_quietly(tmp_path):
    """SIGINT while the clients are firing: a one-line message, exit status 130, no traceback."""
    process = subprocess.Popen([sys.executable, "-m", "txnsafety.cli", "demo", "--no-progress",
                                "--requests", "400", "--think-ms", "20"],
                               cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=_sigint_as_at_a_terminal)
    for line in process.stdout:  # wait for the moment the servers are being hammered
        if line.startswith("Steps 2 and 3"):
            break
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err


def test_report_dir_is_created_where_asked(tmp_path):
    target = tmp_path / "nested" / "out"
    result = run_demo("--requests", "2", "--concurrency", "2", "--servers", "wsgi",
                      "--report-dir", str(target), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(os.listdir(target)) == ["report.html", "report.json"]


def test_an_interrupted_load_goes_on_at_once():
    """Ctrl-C while the clients fire (here: the first progress tick raises it): no client starts
    another request, and the interruption does not wait for the requests in flight."""
    import threading

    from txnsafety.demo.load import fire
    from txnsafety.demo.servers import wsgi_server

    hits, finished, release, lock = [], [], threading.Event(), threading.Lock()

    def app(environ, start_response):
        with lock:
            hits.append(1)
            first = len(hits) == 1
        if not first:
            release.wait(5)  # in flight until the test lets it go (a thread pool waited here)
            finished.append(1)
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]

    def tick():
        raise KeyboardInterrupt

    with wsgi_server(app) as url:
        with pytest.raises(KeyboardInterrupt):
            fire(url + "/", requests=40, concurrency=3, tick=tick)
        assert finished == []          # gone on while the others were still in flight
        sent = len(hits)
        release.set()
    assert sent <= 4, sent             # the first answer and those in flight, not the 40


def test_a_client_that_fails_stops_the_load_with_its_error(monkeypatch):
    """An unexpected error in a client thread reaches the caller (a thread that died without
    answering would leave the load waiting for it for ever)."""
    import threading

    from txnsafety.demo import load

    calls = []

    def post(url):
        calls.append(url)
        if len(calls) == 3:
            raise RuntimeError("the client broke")
        return True

    monkeypatch.setattr(load, "post", post)
    raised = []

    def run():
        try:
            load.fire("http://127.0.0.1:9/", requests=10, concurrency=2, tick=lambda: None)
        except RuntimeError as error:
            raised.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), "the load waited for an answer that never came"
    assert [str(error) for error in raised] == ["the client broke"]
