"""``TXNSAFETY_MODE`` in the environment: a known mode applies, anything else stops startup."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APP = "from txnsafety.wsgi import TxnSafetyMiddleware; import txnsafety; print(txnsafety.settings.mode)"


def start(value: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "TXNSAFETY_"))}
    env["PYTHONPATH"] = str(ROOT)
    if value is not None:
        env["TXNSAFETY_MODE"] = value
    return subprocess.run([sys.executable, "-c", APP], capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.parametrize("value, mode", [(None, "log"), ("", "log"), ("raise", "raise"), ("collect", "collect")])
def test_a_known_mode_applies(value, mode):
    proc = start(value)
    assert proc.returncode == 0 and proc.stdout.strip() == mode, proc.stderr


@pytest.mark.parametrize("value", ["warn", "LOG", "off", "report"])
def test_an_unknown_mode_stops_startup_naming_the_variable(value):
    proc = start(value)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last == (f"txnsafety.config.ConfigurationError: txnsafety: the environment variable "
                    f"TXNSAFETY_MODE={value!r} is not a mode; use one of raise, log, collect (or unset it)")
