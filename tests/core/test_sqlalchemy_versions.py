"""Installing the ``sqlalchemy`` extra never moves an application to a new major
SQLAlchemy, and ``instrument()`` refuses a release older than the supported range with
an error that names both.

The real case: a virtualenv with SQLAlchemy 1.4 installed by pip (an application on
Flask-SQLAlchemy 2.5).  pip's own resolver is asked what installing the extra's
requirement, as setup.cfg declares it, would change there; then ``instrument()`` is
called on 1.4 in a fresh interpreter.
"""
from __future__ import annotations

import configparser
import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.servers import missing
from txnsafety.config import ConfigurationError
from txnsafety.sqlalchemy import SUPPORTED_RANGE
from txnsafety.sqlalchemy.versions import require_supported

ROOT = Path(__file__).resolve().parents[2]


def _extra_requirement() -> str:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    (line,) = [r.strip() for r in cfg["options.extras_require"]["sqlalchemy"].splitlines() if r.strip()]
    return line


@pytest.mark.parametrize("version", ["1.3.24", "1.4.54", "1.4.0b1"])
def test_an_older_release_is_refused_naming_it_and_the_range(version):
    with pytest.raises(ConfigurationError) as refused:
        require_supported(version)
    assert version in str(refused.value) and SUPPORTED_RANGE in str(refused.value)


@pytest.mark.parametrize("version", ["2.0.0", "2.0.36", "2.1.9", "2.1.0b1"])
def test_the_supported_range_is_accepted(version):
    require_supported(version)


@pytest.fixture(scope="module")
def python_with_sqlalchemy_14(tmp_path_factory) -> Path:
    """A virtualenv (seeing this one's packages) where pip installed SQLAlchemy 1.4."""
    env_dir = tmp_path_factory.mktemp("sqla14") / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=True).create(env_dir)
    python = env_dir / "bin" / "python"
    proc = subprocess.run([str(python), "-m", "pip", "install", "-q", "sqlalchemy>=1.4,<2"],
                          capture_output=True, text=True, timeout=600, env=_env())
    if proc.returncode != 0:
        missing(f"pip could not install SQLAlchemy 1.4: {proc.stderr.strip()[-300:]}")
    return python


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def test_installing_the_extra_keeps_an_installed_14(python_with_sqlalchemy_14, tmp_path):
    report = tmp_path / "report.json"
    proc = subprocess.run([str(python_with_sqlalchemy_14), "-m", "pip", "install", "--dry-run", "-q",
                           "--report", str(report), _extra_requirement()],
                          capture_output=True, text=True, timeout=600, env=_env())
    assert proc.returncode == 0, proc.stderr
    would_install = [item["metadata"]["name"] for item in json.loads(report.read_text())["install"]]
    assert would_install == []


REFUSED = """
import sqlalchemy
from sqlalchemy import create_engine
from sqlalchemy.orm import sessionmaker
import txnsafety.sqlalchemy as ts          # importing is fine: nothing is installed yet
from txnsafety.config import ConfigurationError
factory = sessionmaker(create_engine("sqlite://"))
try:
    ts.instrument(factory)
except ConfigurationError as exc:
    print("REFUSED", sqlalchemy.__version__, exc)
print("INSTRUMENTED", ts.is_instrumented(factory()))
"""


def test_instrument_refuses_sqlalchemy_14(python_with_sqlalchemy_14):
    env = {**_env(), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([str(python_with_sqlalchemy_14), "-c", REFUSED], capture_output=True, text=True,
                          timeout=120, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    refused, instrumented = proc.stdout.strip().splitlines()
    version = refused.split()[1]
    assert version.startswith("1.4.")
    assert f"supports {SUPPORTED_RANGE}; this is SQLAlchemy {version}" in refused
    assert instrumented == "INSTRUMENTED False"


def test_this_environment_is_in_the_range():
    """The control: the SQLAlchemy the suite runs on is accepted (so is every other test's)."""
    import sqlalchemy
    require_supported(sqlalchemy.__version__)
    assert sys.modules["sqlalchemy"] is sqlalchemy
