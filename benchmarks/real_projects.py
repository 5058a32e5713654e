"""The runtime checker, strict, in the own test suites of real Django projects.

Not part of CI (it downloads and installs packages).  For each project: its source
with its tests — the sdist from PyPI through pip, or a git commit when the sdist
ships no tests (django-oscar) — a virtualenv with its test requirements and this
checkout of txnsafety, then its suite twice: without txnsafety, and with txnsafety's
own pytest plugin in ``report`` mode (one checker scope per test, every report kept,
no test failed for one) plus a small plugin that switches the checker to strict
(every model checked).  It prints tests passed/failed, time with and without, and
the reports grouped by code, model and sites (``--json`` writes them too).

    python benchmarks/real_projects.py                        # every project below
    python benchmarks/real_projects.py --only django-axes --work /tmp/txnsafety-real
    python benchmarks/real_projects.py --only django-oscar --git django-oscar=/path/to/a/clone

The work directory keeps the downloads and virtualenvs: later runs reuse them.
The hand judgement of every report site is in ``benchmarks/real_suites/``.
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
    git: str = ""                      # clone this commit of this repository instead of the sdist
    commit: str = ""
    install_self: bool = True          # pip install -e the source (False: it runs from PYTHONPATH)


PROJECTS = (
    # a login-security app: counts failed logins per user and IP
    Project("django-axes", "6.5.1", "tests.settings",
            requirements=("pytest", "pytest-django", "pytest-subtests", "django-ipware>=3")),
    # one-time passwords: devices with counters and throttling
    Project("django-otp", "1.5.4", "test_project.settings", tests="src/django_otp",
            requirements=("pytest", "pytest-django", "freezegun", "qrcode", "segno"),
            env={"PYTHONPATH": "src:test"}, pytest_args=("-o", "python_files=tests.py")),
    # a large e-commerce framework: baskets, offers, vouchers, stock, orders.  Its sdist has no
    # tests: the git commit of its 4.2 release line; SQLite in memory (its conftest's --sqlite)
    # spares a PostgreSQL server; installing it would run npm, so it runs from src/.
    Project("django-oscar", "4.2", "tests.settings",
            git="https://github.com/django-oscar/django-oscar", commit="cdbfc4412c87dd9037d62b04755780b76490373c",
            install_self=False, pytest_args=("-p", "no:xdist"),
            # what its conftest's --sqlite sets, too late once pytest-django has read the settings
            env={"PYTHONPATH": "src", "DATABASE_ENGINE": "django.db.backends.sqlite3", "DATABASE_NAME": ":memory:"},
            requirements=("django>=4.2,<5.3", "pillow>=6.0", "django-extra-views>=0.13,<0.17",
                          "django-haystack>=3.0b1", "django-treebeard>=4.7.0", "Babel>=1.0,<3.0", "purl>=0.7",
                          "phonenumbers", "django-phonenumber-field>=4.0.0,<9.0.0", "factory-boy>=3.3.1,<4.0.0",
                          "django-tables2>=2.3,<=2.7", "django-widget-tweaks>=1.4.1", "Whoosh>=2.7,<2.8",
                          "WebTest>=3.0.0,<4.0.0", "django-webtest>=1.9,<1.10", "pytest", "pytest-django>=4.9.0,<5.0",
                          "freezegun>=1.5.1,<2.0.0", "pytz", "sorl-thumbnail>=12.10.0,<13.0.0",
                          "easy-thumbnails>=2.9,<2.11", "django-environ>=0.4,<0.13", "whitenoise>=6.7.0,<6.12",
                          "pycountry", "psycopg2-binary>=2.8,<2.10")),
)

#: Beside txnsafety's own pytest plugin (report mode: a scope per test, reports kept, no test
#: failed for them): the checker strict, and the Django integration on once Django is set up.
PLUGIN = '''
import pytest
import txnsafety


def _activate():
    try:
        from django.apps import apps
    except ImportError:
        return
    if apps.ready:
        from txnsafety.django.apps import activate
        activate()


def pytest_sessionstart(session):
    txnsafety.configure(strict=True)
    _activate()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    _activate()  # idempotent: Django may have been set up by a fixture
'''


def run(cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env, text=True, capture_output=True)


def _git_source(project: Project, work: Path, url: str) -> Path:
    """A clone of ``url`` at the project's commit (a local mirror may stand for the URL)."""
    source = work / "src" / f"{project.name}-{project.commit[:10]}"
    if not source.exists():
        source.parent.mkdir(parents=True, exist_ok=True)
        for cmd in (["git", "clone", "-q", "--no-checkout", url, str(source)],
                    ["git", "-C", str(source), "checkout", "-q", project.commit]):
            done = run(cmd)
            if done.returncode:
                raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr}")
    return source


def prepare(project: Project, work: Path, git_urls: dict[str, str] | None = None) -> tuple[Path, Path]:
    """Fetch the source (sdist or git), build the virtualenv; returns (source dir, python)."""
    if project.git:
        source = _git_source(project, work, (git_urls or {}).get(project.name, project.git))
        return source, _virtualenv(project, work, source)
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
    return source, _virtualenv(project, work, source)


def _virtualenv(project: Project, work: Path, source: Path) -> Path:
    env_dir = work / f"venv-{project.name}"
    python = env_dir / "bin" / "python"
    if not python.exists():
        venv.create(env_dir, with_pip=True)
        steps = [list(project.requirements), [str(REPO)]]
        if project.install_self:
            steps.insert(0, ["-e", str(source)])
        for args in steps:
            done = run([str(python), "-m", "pip", "install", "-q", *args])
            if done.returncode:
                raise SystemExit(f"pip install {' '.join(args)} failed:\n{done.stderr}")
    return python


def suite(project: Project, source: Path, python: Path, work: Path, checked: bool) -> dict:
    """Run the project's tests once; returns counts, time and the reports."""
    junit = work / f"{project.name}-{'checked' if checked else 'plain'}.xml"
    reports = work / f"{project.name}-reports.json"
    env = dict(os.environ, DJANGO_SETTINGS_MODULE=project.settings)
    env.update({k: v for k, v in project.env.items() if k != "PYTHONPATH"})
    env.pop("TXNSAFETY_MODE", None)
    paths = [str(source / p) for p in project.env.get("PYTHONPATH", "").split(":") if p] + [str(source)]
    cmd = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
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
        # txnsafety's plugin comes from its entry point (the virtualenv installed txnsafety; the
        # import finds this checkout first)
        cmd[3:3] = ["-p", "txnsafety_realrun", "--txnsafety-mode=report",
                    f"--txnsafety-json={reports}"]
    else:
        cmd[3:3] = ["-p", "no:txnsafety"]
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
    rows = json.loads(reports.read_text()) if checked and reports.exists() else []
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
    reports = checked["reports"]  # one entry a place, with its count (the plugin's JSON)
    print(f"  reports: {sum(r['count'] for r in reports)} at {len(reports)} place(s), "
          f"{sum(1 for r in reports if r['outside_request'])} of them outside any request")
    by_code = collections.Counter()
    groups = collections.Counter()
    for r in reports:
        by_code[r["code"]] += r["count"]
        groups[(r["code"], r["model"], r["write_site"], r["read_site"])] += r["count"]
    for code, n in sorted(by_code.items()):
        print(f"    {code}: {n}")
    print("  by code, model, write site (read site):")
    for (code, model, write_site, read_site), n in groups.most_common():
        print(f"    {n:4d}  {code} {model}\n          write {write_site}\n          read  {read_site}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default=os.path.join(os.path.expanduser("~"), ".cache", "txnsafety-real"))
    parser.add_argument("--only", action="append", help="a project name (repeatable)")
    parser.add_argument("--git", action="append", default=[], metavar="NAME=URL",
                        help="clone a git project from URL (a local mirror) instead of its own")
    parser.add_argument("--checked-only", action="store_true",
                        help="skip the run without txnsafety (reports only, no time comparison)")
    parser.add_argument("--plain-only", action="store_true", help="only the run without txnsafety (its time)")
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    git_urls = dict(item.split("=", 1) for item in args.git)
    for project in PROJECTS:
        if args.only and project.name not in args.only:
            continue
        source, python = prepare(project, work, git_urls)
        plain = {"counts": collections.Counter(), "time": 0.0, "failed": set(), "reports": []}
        if not args.checked_only:
            plain = suite(project, source, python, work, checked=False)
        if args.plain_only:
            c = plain["counts"]
            print(f"\n== {project.name} {project.version} without txnsafety: {c['passed']} passed "
                  f"{c['failed']} failed {c['skipped']} skipped {plain['time']:.1f} s")
            continue
        checked = suite(project, source, python, work, checked=True)
        summarize(project, plain, checked)
        print(f"  reports as JSON: {work / f'{project.name}-reports.json'}")


if __name__ == "__main__":
    main()
