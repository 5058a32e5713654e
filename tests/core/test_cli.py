"""The txnsafety command as a user runs it: a real subprocess."""
from __future__ import annotations

import subprocess
import sys


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "txnsafety", *args], capture_output=True, text=True, timeout=120)


def test_help_and_codes():
    assert "lint" in _run("--help").stdout and "demo" in _run("--help").stdout
    codes = _run("codes").stdout.splitlines()
    assert codes[0].startswith("TXN101") and len(codes) == 12


def test_a_closed_pipe_is_no_traceback():
    """`txnsafety codes | head -0`: the reader is gone before the first line; no traceback."""
    proc = subprocess.Popen([sys.executable, "-u", "-m", "txnsafety", "codes"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # every write now fails with EPIPE
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0
    assert "BrokenPipeError" not in stderr, stderr


def test_bad_arguments_are_a_clear_error():
    result = _run("no-such-command")
    assert result.returncode == 2 and "invalid choice" in result.stderr and "Traceback" not in result.stderr


def test_demo_is_a_subcommand_with_its_options():
    result = _run("demo", "--help")
    assert result.returncode == 0
    for option in ("--requests", "--concurrency", "--database", "--locks", "--servers", "--report-dir"):
        assert option in result.stdout
