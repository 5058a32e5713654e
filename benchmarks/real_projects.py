"""The runtime checker, strict, in the own test suites of real Django projects from PyPI.

Not part of CI (it downloads and installs packages).  For each project: the sdist
(with its tests) from PyPI through pip, a virtualenv with its test requirements and
this checkout of txnsafety, then its suite twice — without txnsafety and with the
checker on in strict mode (every model checked), one request scope per test,
reports collected, never failing a test — and prints tests passed/failed, time with
and without, and the reports grouped by code, model and sites.

    python benchmarks/real_projects.py                        # every project below
    python benchmarks/real_projects.py --only django-axes --work /tmp/txnsafety-real

The work directory keeps the downloads and virtualenvs: later runs reuse them.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tarfile
import textwrap
import time
import venv
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Project:
    """A Django project whose sdist ships its tests, and how to run them with pytest."""

    name: str
    version: str
    settings: str                      # DJANGO_SETTINGS_MODULE of its test suite
    tests: str = "tests"               # test path inside the sdist
    requirements: tuple[str, ...] = ()  # test requirements (the project itself is installed too)
    env: dict[str, str] = field(default_factory=dict)
    pytest_args: tuple[str, ...] = ()


PROJECTS = (
    # a login-security app: counts failed logins per user and IP
    Project("django-axes", "6.5.1", "tests.settings",
            requirements=("pytest", "pytest-django", "pytest-subtests", "django-ipware>=3")),
    # one-time passwords: devices with counters and throttling
    Project("django-otp", "1.5.4", "test_project.settings", tests="src/django_otp",
            requirements=("pytest", "pytest-django", "freezegun", "qrcode", "segno"),
            env={"PYTHONPATH": "src:test"}, pytest_args=("-o", "python_files=tests.py")),
)

#: The pytest plugin of the checked run: strict checker, one scope per test, reports to a file.
PLUGIN = '''
import json, os
import pytest
import txnsafety
from txnsafety.context import request_scope
from txnsafety.report import add_listener

_out = open(os.environ["TXNSAFETY_REAL_REPORTS"], "a")
_current = {"test": ""}


def _record(violation):
    row = violation.as_dict()
    row["test"] = _current["test"]
    _out.write(json.dumps(row) + "\\n")
    _out.flush()


def pytest_sessionstart(session):
    txnsafety.configure(strict=True, mode="collect", read_sites="always")
    add_listener(_record)
    try:
        import django
        from django.apps import apps
        if apps.ready:
            from txnsafety.django.apps import activate
            activate()
    except ImportError:
        pass


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    from txnsafety.django.apps import activate
    activate()  # idempotent: Django may have been set up by a fixture
    _current["test"] = item.nodeid
    with request_scope(name=item.nodeid):
        yield
'''


def run(cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env, text=True, capture_output=True)


def prepare(project: Project, work: Path) -> tuple[Path, Path]:
    """Download and unpack the sdist, build the virtualenv; returns (source dir, python)."""
    downloads = work / "sdists"
    downloads.mkdir(parents=True, exist_ok=True)
    spec = f"{project.name}=={project.version}"
    if not any(downloads.glob(f"{project.name.replace('-', '_')}-{project.version}.tar.gz")) and \
            not any(downloads.glob(f"{project.name}-{project.version}.tar.gz")):
        done = run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", spec,
                    "-d", str(downloads)])
        if done.returncode:
            raise SystemExit(f"pip download {spec} failed:\n{done.stderr}")
    archive = next(p for p in downloads.iterdir() if p.name.lower().replace("_", "-").startswith(
        f"{project.name}-{project.version}".lower()))
    source = work / "src" / archive.name[: -len(".tar.gz")]
    if not source.exists():
        with tarfile.open(archive) as tar:
            tar.extractall(work / "src", filter="data")
    env_dir = work / f"venv-{project.name}"
    python = env_dir / "bin" / "python"
    if not python.exists():
        venv.create(env_dir, with_pip=True)
        for args in (["-e", str(source)], list(project.requirements), [str(REPO)]):
            done = run([str(python), "-m", "pip", "install", "-q", *args])
            if done.returncode:
                raise SystemExit(f"pip install {' '.join(args)} failed:\n{done.stderr}")
    return source, python


def suite(project: Project, source: Path, python: Path, work: Path, checked: bool) -> dict:
    """Run the project's tests once; returns counts, time and the reports."""
    junit = work / f"{project.name}-{'checked' if checked else 'plain'}.xml"
    reports = work / f"{project.name}-reports.jsonl"
    env = dict(os.environ, DJANGO_SETTINGS_MODULE=project.settings)
    env.pop("TXNSAFETY_MODE", None)
    paths = [str(source / p) for p in project.env.get("PYTHONPATH", "").split(":") if p] + [str(source)]
    cmd = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:txnsafety", "-o", "addopts=",
           f"--junitxml={junit}", *project.pytest_args, project.tests]
    if checked:
        (work / "txnsafety_realrun.py").write_text(textwrap.dedent(PLUGIN))
        # this checkout's txnsafety, whatever the virtualenv installed earlier (a link to the
        # package alone: the checkout's own tests/ must not shadow the project's)
        checkout = work / "checkout"
        checkout.mkdir(exist_ok=True)
        if not (checkout / "txnsafety").exists():
            (checkout / "txnsafety").symlink_to(REPO / "txnsafety", target_is_directory=True)
        paths[:0] = [str(checkout)]
        paths.append(str(work))
        reports.unlink(missing_ok=True)
        reports.touch()
        env["TXNSAFETY_REAL_REPORTS"] = str(reports)
        cmd[3:3] = ["-p", "txnsafety_realrun"]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    started = time.perf_counter()
    done = run(cmd, cwd=source, env=env)
    elapsed = time.perf_counter() - started
    counts = collections.Counter()
    failed_tests = []
    if junit.exists():
        for case in ET.parse(junit).getroot().iter("testcase"):
            outcome = "passed"
            for child in case:
                if child.tag in ("failure", "error"):
                    outcome = "failed"
                elif child.tag == "skipped":
                    outcome = "skipped"
            counts[outcome] += 1
            if outcome == "failed":
                failed_tests.append(f"{case.get('classname')}::{case.get('name')}")
    else:
        print(done.stdout[-3000:], done.stderr[-3000:], file=sys.stderr)
    rows = [json.loads(line) for line in reports.read_text().splitlines()] if checked else []
    return {"counts": counts, "time": elapsed, "failed": set(failed_tests), "reports": rows}


def summarize(project: Project, plain: dict, checked: dict) -> None:
    print(f"\n== {project.name} {project.version}")
    for label, result in (("without txnsafety", plain), ("checked, strict", checked)):
        c = result["counts"]
        print(f"  {label:18} {c['passed']:5d} passed {c['failed']:4d} failed {c['skipped']:4d} skipped "
              f"{result['time']:7.1f} s")
    if plain["time"]:
        print(f"  time with the checker: {100 * (checked['time'] / plain['time'] - 1):+.1f} %")
    broken = sorted(checked["failed"] - plain["failed"])
    print(f"  tests failing only with txnsafety: {len(broken)}")
    for name in broken[:20]:
        print(f"    {name}")
    reports = checked["reports"]
    print(f"  reports: {len(reports)}")
    by_code = collections.Counter(r["code"] for r in reports)
    for code, n in sorted(by_code.items()):
        print(f"    {code}: {n}")
    groups = collections.Counter((r["code"], r["model"], r["write_site"], r["read_site"]) for r in reports)
    print("  by code, model, write site (read site):")
    for (code, model, write_site, read_site), n in groups.most_common():
        print(f"    {n:4d}  {code} {model}\n          write {write_site}\n          read  {read_site}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default=os.path.join(os.path.expanduser("~"), ".cache", "txnsafety-real"))
    parser.add_argument("--only", action="append", help="a project name (repeatable)")
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    for project in PROJECTS:
        if args.only and project.name not in args.only:
            continue
        source, python = prepare(project, work)
        plain = suite(project, source, python, work, checked=False)
        checked = suite(project, source, python, work, checked=True)
        summarize(project, plain, checked)


if __name__ == "__main__":
    main()
