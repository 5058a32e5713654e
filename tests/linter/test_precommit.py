"""A real ``pre-commit try-repo`` run of the ``txnsafety-lint`` hook from .pre-commit-hooks.yaml.

pre-commit clones the hook repository at a commit, so the test builds a throwaway git
repository from a copy of the current working tree (committed or not) and points
``pre-commit try-repo`` at it; pre-commit then installs it into its own virtualenv
(from PyPI for the dependencies) and runs the hook on a second throwaway repository.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from .helpers import FIXTURES, ROOT

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}


def _git(*args, cwd):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={**os.environ, **GIT_ENV})


def _copy_tree(dst):
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                            capture_output=True, check=True).stdout.split(b"\0")
    for raw in listed:
        if not raw:
            continue
        rel = raw.decode()
        src = ROOT / rel
        if not src.is_file():
            continue
        target = dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)


def _hookrepo(tmp_path):
    hookrepo = tmp_path / "hookrepo"
    _copy_tree(hookrepo)
    assert (hookrepo / ".pre-commit-hooks.yaml").is_file()
    _git("init", "-q", cwd=hookrepo)
    _git("add", "-A", cwd=hookrepo)
    _git("commit", "-qm", "snapshot", cwd=hookrepo)
    return hookrepo


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_pre_commit_try_repo(tmp_path):
    hookrepo = _hookrepo(tmp_path)

    project = tmp_path / "project"
    project.mkdir()
    _git("init", "-q", cwd=project)
    shutil.copy(FIXTURES / "django_txn101.py", project / "views.py")
    (project / "clean.py").write_text("def f():\n    return 1\n")
    _git("add", "-A", cwd=project)

    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home")}
    cmd = [sys.executable, "-m", "pre_commit", "try-repo", str(hookrepo), "txnsafety-lint"]
    proc = subprocess.run(cmd + ["--all-files"], cwd=project, capture_output=True, text=True,
                          env=env, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "txnsafety lint" in out and "Failed" in out
    assert "views.py:11:9: TXN101 half-protected" in out
    assert "clean.py" not in out

    proc = subprocess.run(cmd + ["--files", "clean.py"], cwd=project, capture_output=True,
                          text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Passed" in proc.stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_pre_commit_file_subsets_roles_excludes_and_baseline(tmp_path):
    """pre-commit names files: tests and migrations stay quiet, [tool.txnsafety] excludes
    apply (the hook passes --force-exclude), and a baseline written by `txnsafety lint .`
    absorbs the findings pre-commit sees file by file."""
    hookrepo = _hookrepo(tmp_path)
    project = tmp_path / "project"
    for rel in ("shop/views.py", "shop/tests/test_views.py", "shop/migrations/0002_data.py",
                "legacy/old.py", "other/racy.py"):
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(FIXTURES / "django_txn101.py", project / rel)
    (project / "pyproject.toml").write_text('[tool.txnsafety]\nextend-exclude = ["legacy"]\n')
    _git("init", "-q", cwd=project)
    _git("add", "-A", cwd=project)
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home")}
    cmd = [sys.executable, "-m", "pre_commit", "try-repo", str(hookrepo), "txnsafety-lint"]

    def run(*args, cmd=cmd):
        proc = subprocess.run(cmd + list(args), cwd=project, capture_output=True, text=True,
                              env=env, timeout=600)
        return proc.returncode, proc.stdout + proc.stderr

    status, out = run("--files", "shop/tests/test_views.py", "shop/migrations/0002_data.py",
                      "legacy/old.py")
    assert status == 0 and "Passed" in out, out
    status, out = run("--files", "shop/views.py", "shop/tests/test_views.py")
    assert status == 1 and "shop/views.py:11:9: TXN101" in out, out
    assert "test_views.py:" not in out and "1 in tests" not in out
    assert "3 findings not shown: 3 in tests (--include-tests to show them)" in out

    # the baseline: written with `txnsafety lint .`, read when pre-commit passes paths
    subprocess.run([sys.executable, "-m", "txnsafety_lint", ".", "--write-baseline",
                    ".txnsafety-baseline.json"], cwd=project, check=True, capture_output=True)
    rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=hookrepo, capture_output=True,
                         text=True, check=True).stdout.strip()
    (project / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {hookrepo}\n    rev: {rev}\n    hooks:\n"
        f"      - id: txnsafety-lint\n        args: [--baseline, .txnsafety-baseline.json]\n")
    _git("add", "-A", cwd=project)
    run_cmd = [sys.executable, "-m", "pre_commit", "run"]
    status, out = run("--files", "shop/views.py", "other/racy.py", cmd=run_cmd)
    assert status == 0 and "Passed" in out, out
    with open(project / "other" / "racy.py", "a") as fh:
        fh.write("\n\ndef again(pk):\n    account = Account.objects.get(pk=pk)\n"
                 "    with transaction.atomic():\n        account.balance -= 1\n"
                 "        account.save()\n")
    status, out = run("--files", "shop/views.py", "other/racy.py", cmd=run_cmd)
    assert status == 1 and "other/racy.py:" in out and out.count(": TXN101") == 1, out


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_pre_commit_hook_with_fix_rewrites_the_staged_files(tmp_path):
    """``args: [--fix]``: the hook rewrites the files it names, pre-commit fails the run
    because files changed (as with Ruff's fixer), and the next run passes untouched."""
    hookrepo = _hookrepo(tmp_path)
    project = tmp_path / "project"
    project.mkdir()
    _git("init", "-q", cwd=project)
    shutil.copy(FIXTURES / "django_txn106.py", project / "views.py")
    shutil.copy(FIXTURES / "sqlalchemy_txn106.py", project / "models_sqla.py")
    # the fixtures' counters are view and like counts (statistics: low severity, not shown
    # by default, and --fix fixes what is shown)
    (project / "pyproject.toml").write_text('[tool.txnsafety]\nmin-severity = "low"\n')
    rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=hookrepo, capture_output=True,
                         text=True, check=True).stdout.strip()
    (project / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {hookrepo}\n    rev: {rev}\n    hooks:\n"
        f"      - id: txnsafety-lint\n        args: [--fix]\n")
    _git("add", "-A", cwd=project)
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home")}
    cmd = [sys.executable, "-m", "pre_commit", "run", "--all-files"]
    before = (project / "views.py").read_text()
    proc = subprocess.run(cmd, cwd=project, capture_output=True, text=True, env=env, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Failed" in out and "files were modified by this hook" in out, out
    after = (project / "views.py").read_text()
    assert after != before and 'update(views=F("views") + 1)' in after
    assert "post.likes = Post.likes + 1" in (project / "models_sqla.py").read_text()
    _git("add", "-A", cwd=project)
    proc = subprocess.run(cmd, cwd=project, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0 and "Passed" in proc.stdout, proc.stdout + proc.stderr
    assert (project / "views.py").read_text() == after
