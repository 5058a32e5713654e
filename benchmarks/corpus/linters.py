"""The linters a corpus run compares: the working tree's, and optionally a git revision's.

Each runs as ``python -m txnsafety_lint --format json`` in a fresh process from the
release's root, at default settings, as a user would run ``txnsafety lint .`` in their
checkout.  A revision is checked out once into the cache (a detached ``git worktree``)
and put first on ``PYTHONPATH`` under the package names the wheel would install.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

from .releases import cache_dir

REPO = Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True)
class Finding:
    path: str
    line: int
    code: str
    message: str


def _source_hash(tree: Path) -> str:
    """What the linter's findings depend on: its own sources (and the shared code table)."""
    digest = hashlib.sha256()
    for path in sorted((tree / "linter").rglob("*.py")) + [tree / "txnsafety" / "codes.py"]:
        digest.update(path.relative_to(tree).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class Linter:
    """A linter to run: ``pythonpath`` None means the installed (working tree) one.

    Findings are cached per release under the hash of the linter's sources, so scoring again
    after new judgments (or with the same code) costs no lint run."""

    label: str
    pythonpath: Optional[str] = None
    source: Path = REPO

    def run(self, root: Path, extra_args: tuple[str, ...] = ()) -> list[Finding]:
        cached = cache_dir() / "findings" / _source_hash(self.source) / f"{root.name}.json"
        if cached.is_file() and not extra_args:
            return [Finding(**row) for row in json.loads(cached.read_text())]
        found = self._run(root, extra_args)
        if not extra_args:
            cached.parent.mkdir(parents=True, exist_ok=True)
            cached.write_text(json.dumps([dataclasses.asdict(f) for f in found]))
        return found

    def _run(self, root: Path, extra_args: tuple[str, ...]) -> list[Finding]:
        env = dict(os.environ)
        if self.pythonpath:
            env["PYTHONPATH"] = self.pythonpath + os.pathsep + env.get("PYTHONPATH", "")
        cmd = [sys.executable, "-m", "txnsafety_lint", "--format", "json", "--exit-zero", *extra_args, "."]
        proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=1800)
        try:
            rows = json.loads(proc.stdout or "[]")
        except json.JSONDecodeError:
            raise RuntimeError(f"{self.label} on {root.name}: no JSON (exit {proc.returncode}): "
                               f"{proc.stderr.strip()[-500:]}") from None
        return [Finding(_relative(r["path"], root), int(r["line"]), r["code"], r["message"]) for r in rows]


def _relative(path: str, root: Path) -> str:
    path = path.replace(os.sep, "/")
    if os.path.isabs(path):
        path = os.path.relpath(path, root).replace(os.sep, "/")
    while path.startswith("./"):
        path = path[2:]
    return path


def at_revision(rev: str) -> Linter:
    """The linter as committed at ``rev`` (checked out once into the cache)."""
    sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", rev], capture_output=True,
                         text=True, check=True).stdout.strip()
    tree = cache_dir() / "revisions" / sha
    if not tree.is_dir():
        tree.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-f", str(tree), sha],
                       capture_output=True, check=True)
    return Linter(label=sha, pythonpath=str(_packages(tree, tree.parent / f"{sha}-packages")), source=tree)


def working_tree() -> Linter:
    """The linter of this checkout, imported from it whatever is pip-installed.  Each
    checkout links its own folder (two checkouts benchmarked at once must not re-point one
    shared link under each other's runs)."""
    checkout = hashlib.sha256(str(REPO).encode()).hexdigest()[:10]
    return Linter(label="working-tree",
                  pythonpath=str(_packages(REPO, cache_dir() / f"working-tree-packages-{checkout}")))


def _packages(tree: Path, pkgs: Path) -> Path:
    """A folder to put first on ``PYTHONPATH``: the package names the wheel installs, linked
    to ``tree``'s sources."""
    pkgs.mkdir(parents=True, exist_ok=True)
    for name, target in (("txnsafety", tree / "txnsafety"), ("txnsafety_lint", tree / "linter")):
        link = pkgs / name
        if link.is_symlink() and link.resolve() != target.resolve():
            link.unlink()
        if not link.exists():
            link.symlink_to(target)
    return pkgs
