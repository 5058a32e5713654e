"""The package as users install it: a light runtime, the linter behind the ``lint`` extra.

The wheel is built from a copy of the working tree and installed with pip into a real
virtualenv without the extra; flake8 (installed beside it, as a project that uses flake8
for other checks has it) must run and say in one line what the TXN checks need.
"""
from __future__ import annotations

import configparser
import email
import os
import re
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
import yaml

import txnsafety

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = {"webob", "asgiref"}
LINT = {"libcst", "flake8", "pathspec", "tomli"}


def _copy_tree(dst: Path) -> None:
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                            capture_output=True, check=True).stdout.split(b"\0")
    for raw in filter(None, listed):
        src = ROOT / raw.decode()
        if src.is_file():
            target = dst / raw.decode()
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    _copy_tree(tmp / "src")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                           "-q", "-w", str(tmp), str(tmp / "src")], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return next(tmp.glob("txnsafety-*.whl"))


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return email.message_from_bytes(zf.read(name))


def _name(requirement: str) -> str:
    for sep in "<>=;[ !~":
        requirement = requirement.split(sep)[0]
    return requirement.strip().lower()


def test_the_wheel_requires_only_the_runtime_and_declares_the_lint_extra(wheel):
    meta = _metadata(wheel)
    requires = meta.get_all("Requires-Dist") or []
    plain = {_name(r) for r in requires if "extra ==" not in r}
    assert plain == RUNTIME, requires
    lint = {_name(r) for r in requires if "extra == \"lint\"" in r}
    assert lint == LINT, requires
    test = {_name(r) for r in requires if "extra == \"test\"" in r}
    assert LINT <= test and {"sentry-sdk", "opentelemetry-sdk", "prometheus-client"} <= test


def test_license_classifiers_urls_and_one_version(wheel):
    meta = _metadata(wheel)
    assert meta["Version"] == txnsafety.__version__
    assert wheel.name.startswith(f"txnsafety-{txnsafety.__version__}-")
    with zipfile.ZipFile(wheel) as zf:
        licenses = [n for n in zf.namelist() if n.endswith("/LICENSE")]
        assert licenses, zf.namelist()
        assert zf.read(licenses[0]).decode().startswith("MIT License")
    classifiers = meta.get_all("Classifier")
    for minor in ("3.10", "3.11", "3.12", "3.13"):
        assert f"Programming Language :: Python :: {minor}" in classifiers
    assert "License :: OSI Approved :: MIT License" in classifiers
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL"))
    assert {"Documentation", "Source", "Issues"} <= set(urls)
    # no copy of the version number elsewhere in the package sources
    for path in list((ROOT / "txnsafety").rglob("*.py")) + list((ROOT / "linter").rglob("*.py")):
        if path.name != "__init__.py" or path.parent.name != "txnsafety":
            assert f'"{txnsafety.__version__}"' not in path.read_text(), path


def test_the_pre_commit_hook_installs_the_lint_extra():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    extra = [r.strip() for r in cfg["options.extras_require"]["lint"].splitlines() if r.strip()]
    hook = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())[0]
    normal = lambda reqs: sorted(r.replace('"', "'").replace(" ", "") for r in reqs)  # noqa: E731
    assert normal(hook["additional_dependencies"]) == normal(extra)


def test_a_light_install_in_a_real_venv(wheel, tmp_path):
    """pip install of the wheel without the extra, plus flake8: nothing crashes."""
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = str(env_dir / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run([py, "-m", "pip", "install", "-q", str(wheel), "flake8"], capture_output=True,
                          text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = subprocess.run([py, "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True,
                          env=env, check=True)
    installed = {line.split("==")[0].lower() for line in proc.stdout.split()}
    assert not {"libcst", "pathspec"} & installed, installed

    work = tmp_path / "project"
    work.mkdir()
    (work / "app.py").write_text("def f(x):\n    return x + 1\n")
    (work / "bad.py").write_text("import os\n")
    # the runtime works
    proc = subprocess.run([py, "-c", "import txnsafety, txnsafety.wsgi, txnsafety.asgi, txnsafety.locks; "
                           "print(txnsafety.__version__)"], capture_output=True, text=True, cwd=work, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == txnsafety.__version__, proc.stderr
    # flake8 runs its other checks and exits as they decide; one line says what TXN needs
    for i in range(6):  # enough files for flake8 to run its worker processes
        (work / f"more{i}.py").write_text("x = 1\n")
    for targets, status in ((["app.py"], 0), (["bad.py"], 1), (["--jobs=2", "."], 1)):
        proc = subprocess.run([py, "-m", "flake8", *targets], capture_output=True, text=True, cwd=work,
                              env=env, timeout=120)
        assert proc.returncode == status, proc.stdout + proc.stderr
        [line] = proc.stderr.strip().splitlines()
        assert re.fullmatch(r"txnsafety: the TXN checks need the lint extra \((libcst|pathspec) is missing\): "
                            r"pip install 'txnsafety\[lint\]'", line), line
    assert "F401" in proc.stdout
    # the txnsafety lint command says the same, exit status 2
    proc = subprocess.run([str(env_dir / "bin" / "txnsafety"), "lint", "app.py"], capture_output=True,
                          text=True, cwd=work, env=env)
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert re.fullmatch(r"txnsafety lint: the linter needs the lint extra \((libcst|pathspec) is missing\): "
                        r"pip install 'txnsafety\[lint\]'", line), line
