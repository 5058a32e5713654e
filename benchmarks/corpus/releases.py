"""Pinned releases from PyPI, downloaded once and unpacked into a cache.

The corpora name releases (``name``, ``version``, ``dist``), never hold their code:
this module brings each one here with pip, the way a user's machine would, and
unpacks it so that corpus paths (relative to the distribution's root) resolve.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path


def cache_dir() -> Path:
    """Where downloads and unpacked trees live (``$TXNSAFETY_CORPUS_CACHE``)."""
    default = Path.home() / ".cache" / "txnsafety-corpus"
    return Path(os.environ.get("TXNSAFETY_CORPUS_CACHE", default))


@dataclasses.dataclass(frozen=True)
class Release:
    """One released version of a project, as an sdist or a wheel."""

    name: str
    version: str
    dist: str = "sdist"

    def __post_init__(self) -> None:
        if self.dist not in ("sdist", "wheel"):
            raise ValueError(f"{self.name} {self.version}: dist must be 'sdist' or 'wheel', not {self.dist!r}")

    @property
    def label(self) -> str:
        return f"{self.name}=={self.version}"


class ReleaseError(Exception):
    """A release that could not be downloaded or unpacked; the message says why."""


def _download(release: Release, into: Path) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    # only this package's format is forced: with ``:all:`` pip would also build its build
    # dependencies from source (old setuptools, Rust-backed ones), which often fails
    binary = ["--no-binary" if release.dist == "sdist" else "--only-binary", release.name]
    # pip prepares an sdist's metadata (in an isolated build environment) before it keeps it
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q",
           *binary, "-d", str(into), release.label]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    archives = [p for p in into.iterdir() if p.suffix in (".gz", ".zip", ".whl", ".bz2")]
    if not archives:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise ReleaseError(f"pip download {release.label} ({release.dist}) failed: {' / '.join(tail)}")
    return archives[0]


def _unpack(archive: Path, dest: Path) -> None:
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if archive.name.endswith((".tar.gz", ".tgz", ".tar.bz2")):
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        tops = list(tmp.iterdir())
        root = tops[0] if len(tops) == 1 and tops[0].is_dir() else tmp
    else:
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(tmp)
        tops = list(tmp.iterdir())
        # an sdist as .zip has one top directory; a wheel has its packages at the root
        root = tops[0] if archive.suffix == ".zip" and len(tops) == 1 and tops[0].is_dir() else tmp
    if root != tmp:
        root.rename(dest)
        shutil.rmtree(tmp)
    else:
        tmp.rename(dest)


def unpacked(release: Release) -> Path:
    """The release's root directory, downloading and unpacking it on first use."""
    dest = cache_dir() / "unpacked" / f"{release.name}-{release.version}-{release.dist}"
    if dest.is_dir():
        return dest
    archive_dir = cache_dir() / "downloads" / f"{release.name}-{release.version}-{release.dist}"
    archives = [p for p in archive_dir.iterdir()] if archive_dir.is_dir() else []
    archive = archives[0] if archives else _download(release, archive_dir)
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        _unpack(archive, dest)
    except (OSError, tarfile.TarError, zipfile.BadZipFile) as exc:
        raise ReleaseError(f"cannot unpack {archive.name}: {exc}") from None
    return dest


def python_lines(root: Path) -> int:
    """Lines of Python under ``root`` (what the corpus size is measured in)."""
    total = 0
    for path in root.rglob("*.py"):
        try:
            with open(path, "rb") as fh:
                total += sum(1 for _ in fh)
        except OSError:
            continue
    return total
