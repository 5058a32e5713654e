"""Misconfiguration caught where Django users look: ``manage.py check`` of a real project.

Each case writes a small Django project (an app with a model, the settings under test)
and runs its ``manage.py check`` in a fresh process, so ``ready()`` and Django's check
framework run exactly as they do for users.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

from .django_project import AUTH, COMMON, OURS, SESSION, _env, manage


def test_a_good_configuration_has_no_issues(tmp_path):
    proc = manage(tmp_path, "check", txnsafety={"MODE": "log", "ALLOW": ["Account:TXN103", "shop.*"]})
    assert proc.returncode == 0, proc.stderr
    assert "System check identified no issues" in proc.stdout


@pytest.mark.parametrize("value, hint", [
    ({"MODE": "warn"}, "HINT: MODE is one of 'raise', 'log', 'collect'"),
    ("log", "HINT: TXNSAFETY is a dict"),
    ({"MOOD": "log"}, "HINT: TXNSAFETY is a dict"),
    ({"ALLOW": "Account"}, "HINT: ALLOW is a list of"),
    ({"ALLOW": ["Account:E501"]}, "HINT: ALLOW is a list of"),
    ({"PRIORITY_RULE": "no.such.rule"}, "HINT: PRIORITY_RULE is a callable"),
    ({"BATCH_PATHS": "/cron/"}, "HINT: BATCH_PATHS is a list"),
    ({"LOG_LEVEL": "LOUD"}, "HINT: LOG_LEVEL is a logging level"),
    ({"SAMPLE_RATE": 10}, "HINT: SAMPLE_RATE is the share of requests checked"),
    ({"SAMPLER": "no.such.sampler"}, "HINT: SAMPLER is a callable (method, path, headers)"),
    ({"SAMPLER": 0.5}, "HINT: SAMPLER is a callable (method, path, headers)"),
])
def test_a_bad_setting_is_error_e001_with_a_hint_not_a_traceback(tmp_path, value, hint):
    proc = manage(tmp_path, "check", txnsafety=value)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert "settings.TXNSAFETY: (txnsafety.E001) settings.TXNSAFETY" in proc.stderr
    assert hint in proc.stderr


def test_the_middleware_missing_is_w001(tmp_path):
    proc = manage(tmp_path, "check", middleware=[SESSION, COMMON])
    assert proc.returncode == 0
    assert "(txnsafety.W001)" in proc.stderr


def test_the_middleware_after_database_middleware_is_w002(tmp_path):
    proc = manage(tmp_path, "check", middleware=[COMMON, SESSION, AUTH, OURS])
    assert proc.returncode == 0
    assert "(txnsafety.W002)" in proc.stderr
    assert f"after {SESSION}, {AUTH}" in proc.stderr
    # after middleware that touches no database: fine
    proc = manage(tmp_path, "check", middleware=[COMMON, OURS, SESSION, AUTH])
    assert "System check identified no issues" in proc.stdout, proc.stderr


def test_allow_entries_naming_unknown_models_or_codes_are_warnings(tmp_path):
    proc = manage(tmp_path, "check", txnsafety={"ALLOW": ["Acount", "shop.Account:TXN999", "auth.*"]})
    assert proc.returncode == 0, proc.stderr
    out = proc.stderr
    assert "(txnsafety.W003) settings.TXNSAFETY['ALLOW'] entry 'Acount' matches no installed model" in out
    assert "(txnsafety.W004) settings.TXNSAFETY['ALLOW'] entry 'shop.Account:TXN999' names TXN999" in out
    assert out.count("(txnsafety.W00") == 2  # "auth.*" and shop.Account match


def test_a_warning_can_be_silenced_the_django_way(tmp_path):
    proc = manage(tmp_path, "check", middleware=[SESSION, OURS])
    assert "txnsafety.W002" in proc.stderr
    with open(tmp_path / "settings.py", "a") as fh:
        fh.write("SILENCED_SYSTEM_CHECKS = ['txnsafety.W002']\n")
    proc = subprocess.run([sys.executable, "manage.py", "check"], cwd=tmp_path, capture_output=True,
                          text=True, env=_env(), timeout=120)
    assert "System check identified no issues (1 silenced)" in proc.stdout, proc.stderr


def test_an_unknown_mode_in_the_environment_stops_startup_naming_the_variable(tmp_path):
    proc = manage(tmp_path, "check", env=_env(TXNSAFETY_MODE="warn"))
    assert proc.returncode != 0
    assert "the environment variable TXNSAFETY_MODE='warn' is not a mode; use one of raise, log, collect" \
        in proc.stderr
    proc = manage(tmp_path, "check", env=_env(TXNSAFETY_MODE="collect"))
    assert proc.returncode == 0, proc.stderr
