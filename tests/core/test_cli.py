"""The txnsafety command as a user runs it: a real subprocess."""
from __future__ import annotations

import subprocess
import sys


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "txnsafety", *args], capture_output=True, text=True, timeout=120)


def test_help_and_codes():
    assert "lint" in _run("--help").stdout
    codes = _run("codes").stdout.splitlines()
    assert codes[0].startswith("TXN101") and len(codes) == 12


def test_example_loses_writes_only_on_the_racy_endpoint():
    result = _run("example", "--requests", "40", "--concurrency", "4")
    assert result.returncode == 0, result.stderr
    racy = next(line for line in result.stdout.splitlines() if line.startswith("racy"))
    fixed = next(line for line in result.stdout.splitlines() if line.startswith("fixed"))
    assert "TXN102" in racy and fixed.split()[3] == "0" and fixed.split()[4] == "none"


def test_a_closed_pipe_is_no_traceback():
    """`txnsafety codes | head -0`: the reader is gone before the first line; no traceback."""
    proc = subprocess.Popen([sys.executable, "-u", "-m", "txnsafety", "codes"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # every write now fails with EPIPE
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0
    assert "BrokenPipeError" not in stderr, stderr


def test_bad_arguments_are_a_clear_error():
    result = _run("example", "--requests", "0")
    assert result.returncode == 2 and "must be >= 1" in result.stderr and "Traceback" not in result.stderr
