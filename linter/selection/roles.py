"""What part a file plays in a project, and whether its findings are shown by default.

A lost write needs two writers racing on the same rows.  Test code, test fixtures and
factories, migrations and one-off scripts (``setup.py``, ``docs/conf.py``, ``manage.py``,
a top-level ``scripts/`` folder, ``examples/``) run alone, so findings in them are noise on a first run:
they are counted and left out unless asked for (``--include-tests``,
``--include-migrations``, ``--include-scripts``).  Django management commands and other
CLI commands (``__main__.py``, a ``cli.py`` module or a ``cli/`` package, where Click, Typer
and Flask keep their commands) are left out too (``--include-commands``): measured on real
projects, what they held were imports and setup steps run once by hand.  A command that
cron runs beside requests races like a view: show it with ``per-file-roles`` (role
``app``) or ``include-commands``.  Startup code (``AppConfig.ready()``, an app factory, a
lifespan handler, and what only it calls) is a group of its own, found by its callers
(``project/callers.py``; ``--include-startup``), not by its file.

:func:`classify` is the one classifier, used by ``txnsafety lint``, the flake8 plugin and
the corpus benchmark.  Patterns are gitignore-style (``pathspec``) and are matched against
the path relative to the project root, ``/`` separated.
"""
from __future__ import annotations

import enum
import functools
from typing import Mapping, Optional

import pathspec


class FileRole(enum.Enum):
    """The role of a source file; ``value`` is the name used in configuration."""

    APP = "app"
    COMMAND = "command"       # management commands, __main__ modules: mostly run once by hand
    TEST = "test"
    FIXTURE = "fixture"       # test fixtures and factories
    MIGRATION = "migration"   # Django and alembic migrations
    SCRIPT = "script"         # one-off code: setup.py, docs/conf.py, manage.py, /scripts/


class QuietGroup(enum.Enum):
    """A group of roles whose findings are left out unless the group is included."""

    TESTS = "tests"
    MIGRATIONS = "migrations"
    SCRIPTS = "scripts"
    COMMANDS = "commands"
    STARTUP = "startup"       # code an app runs once as it starts (``AppConfig.ready``, a lifespan)

    @property
    def option(self) -> str:
        """The command-line flag that shows the group (``--include-tests``...)."""
        return f"--include-{self.value}"

    @property
    def setting(self) -> str:
        """The ``[tool.txnsafety]`` key that shows the group (``include-tests``...)."""
        return f"include-{self.value}"


#: Roles whose findings are left out by default, by the group that brings them back.
QUIET: Mapping[FileRole, QuietGroup] = {
    FileRole.TEST: QuietGroup.TESTS,
    FileRole.FIXTURE: QuietGroup.TESTS,
    FileRole.MIGRATION: QuietGroup.MIGRATIONS,
    FileRole.SCRIPT: QuietGroup.SCRIPTS,
    FileRole.COMMAND: QuietGroup.COMMANDS,
}

# Checked in this order: the first role whose patterns match wins, so a test of a
# migration (tests/migrations/test_x.py) is a test and a factory under tests/ too.
_PATTERNS: tuple[tuple[FileRole, tuple[str, ...]], ...] = (
    (FileRole.TEST, ("test_*.py", "*_test.py", "tests.py", "conftest.py", "tests/", "test/",
                     "test_utils/", "testutils/")),
    (FileRole.FIXTURE, ("fixtures/", "factories.py", "factory.py", "*_factories.py",
                        "factories/")),
    (FileRole.MIGRATION, ("migrations/", "migration/", "**/alembic/versions/")),   # CKAN: migration/<ext>/versions/
    (FileRole.SCRIPT, ("/setup.py", "/manage.py", "/noxfile.py", "/fabfile.py", "/conf.py",
                       "docs/conf.py", "doc/conf.py", "/scripts/", "examples/", "example/",
                       "/.github/", "/.gitlab/", "/.circleci/")),       # CI-only code
    (FileRole.COMMAND, ("**/management/commands/", "__main__.py", "cli.py", "cli/")),
)


@functools.lru_cache(maxsize=None)
def _spec(patterns: tuple[str, ...]) -> pathspec.GitIgnoreSpec:
    return pathspec.GitIgnoreSpec.from_lines(patterns)


def classify(relpath: str, overrides: Optional[Mapping[str, FileRole]] = None) -> FileRole:
    """The role of the file at ``relpath`` (relative to the project root, ``/`` or ``os.sep``
    separated).  ``overrides`` maps gitignore-style patterns to roles (the
    ``per-file-roles`` setting); the last matching override wins over the built-in rules,
    as a later line of a .gitignore does."""
    path = relpath.replace("\\", "/").lstrip("/")
    while path.startswith("./"):
        path = path[2:]
    if overrides:
        chosen = None
        for pattern, role in overrides.items():
            if _spec((pattern,)).match_file(path):
                chosen = role
        if chosen is not None:
            return chosen
    for role, patterns in _PATTERNS:
        if _spec(patterns).match_file(path):
            return role
    return FileRole.APP


def parse_role(name: str) -> FileRole:
    """``"test"`` -> FileRole.TEST; ValueError naming the known roles otherwise."""
    try:
        return FileRole(str(name).strip().lower())
    except ValueError:
        raise ValueError(f"unknown role {name!r} (one of "
                         f"{', '.join(r.value for r in FileRole)})") from None
