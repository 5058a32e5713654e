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


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_pre_commit_try_repo(tmp_path):
    hookrepo = tmp_path / "hookrepo"
    _copy_tree(hookrepo)
    assert (hookrepo / ".pre-commit-hooks.yaml").is_file()
    _git("init", "-q", cwd=hookrepo)
    _git("add", "-A", cwd=hookrepo)
    _git("commit", "-qm", "snapshot", cwd=hookrepo)

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
