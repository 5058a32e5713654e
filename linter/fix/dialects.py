"""Which database a SQLAlchemy project runs on, as far as its code tells: what the
``on_conflict_do_nothing()`` fix needs to choose ``sqlalchemy.dialects.postgresql.insert``
or ``sqlalchemy.dialects.sqlite.insert``.

A module that imports one dialect (``from sqlalchemy.dialects.postgresql import JSONB``) is
written for that database already, and that is the answer.  Otherwise the project's own
modules say it: their imports of ``sqlalchemy.dialects.postgresql`` or ``.sqlite``, and the
database URLs written in the code (``create_engine("postgresql+psycopg://...")``).  Tests are left out (a project on
PostgreSQL often tests on SQLite).  Exactly one dialect named is the answer; none, or both (a
project that runs on either, or a development default of ``sqlite:///dev.db``), is no
answer, and the fix declines rather than guess."""
from __future__ import annotations

import dataclasses
import os
import re
from typing import Iterable, Optional

#: the dialects the fix writes an insert for, by the name SQLAlchemy gives them
DIALECTS = ("postgresql", "sqlite")
_IMPORTED = re.compile(r"^\s*(?:from\s+sqlalchemy\.dialects(?:\.(?P<sub>\w+))?\s+import\s+(?P<names>[^\n#]+)"
                       r"|import\s+sqlalchemy\.dialects\.(?P<mod>\w+))", re.MULTILINE)
_URL = re.compile(r"""["'](?P<name>postgresql|postgres|sqlite)(?:\+\w+)?://""")
_PROJECT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
_SKIPPED_DIRS = {".git", ".hg", ".tox", ".nox", "venv", ".venv", "env", "node_modules", "site-packages",
                 "build", "dist", "__pycache__", "tests", "test", "testing", "migrations", "alembic"}
#: the most project files read to find the answer (a larger tree is read in part)
MAX_FILES = 3000
_MAX_BYTES = 400_000


@dataclasses.dataclass(frozen=True)
class DialectEvidence:
    """The dialects a project imports, and the ones its database URLs name."""

    imported: frozenset
    in_urls: frozenset

    @property
    def dialect(self) -> Optional[str]:
        """The one dialect the project is on, or None when it cannot be told (none named,
        or both: a project that runs on either, a development default among them)."""
        named = self.imported | self.in_urls
        return next(iter(named)) if len(named) == 1 else None

    def why_unknown(self) -> str:
        named = self.imported | self.in_urls
        if named:
            return (f"the project uses both {' and '.join(sorted(named))}: the insert's dialect "
                    f"cannot be chosen for it")
        return ("cannot tell the project's database (no sqlalchemy.dialects.postgresql / .sqlite "
                "import nor database URL in its code): the insert's dialect is not guessed")


def dialects_in(text: str) -> tuple[set, set]:
    """(dialects imported, dialects named by a URL) in one module's text."""
    imported: set = set()
    for m in _IMPORTED.finditer(text):
        if m["mod"]:
            imported.add(m["mod"])
        elif m["sub"]:
            imported.add(m["sub"])
        else:
            imported.update(n for n in re.findall(r"\w+", m["names"]) if n in DIALECTS)
    urls = {"postgresql" if m["name"] == "postgres" else m["name"] for m in _URL.finditer(text)}
    return {d for d in imported if d in DIALECTS}, urls


def project_root(path: str) -> Optional[str]:
    """The nearest directory above ``path`` holding a project marker, else None."""
    here = os.path.dirname(os.path.abspath(path))
    while True:
        if any(os.path.exists(os.path.join(here, marker)) for marker in _PROJECT_MARKERS):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def _is_test(name: str) -> bool:
    return name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"


def project_files(root: str) -> Iterable[str]:
    """The project's own ``.py`` files (no tests, migrations or virtualenvs), at most
    :data:`MAX_FILES`."""
    count = 0
    for here, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS and not d.startswith("."))
        for name in sorted(files):
            if name.endswith(".py") and not _is_test(name):
                count += 1
                if count > MAX_FILES:
                    return
                yield os.path.join(here, name)


_CACHE: dict[str, tuple[frozenset, frozenset]] = {}


def _scan(root: str) -> tuple[frozenset, frozenset]:
    if root not in _CACHE:
        imported: set = set()
        urls: set = set()
        for path in project_files(root):
            try:
                if os.path.getsize(path) > _MAX_BYTES:
                    continue
                with open(path, encoding="utf-8", errors="replace") as fh:
                    text = fh.read()
            except OSError:
                continue
            got = dialects_in(text)
            imported |= got[0]
            urls |= got[1]
        _CACHE[root] = (frozenset(imported), frozenset(urls))
    return _CACHE[root]


def project_dialect(path: str, text: str) -> DialectEvidence:
    """What the module at ``path`` (its current ``text``) and its project's other modules
    say about the database."""
    imported, urls = dialects_in(text)
    if len(imported) == 1:              # the module is written for that database already
        return DialectEvidence(frozenset(imported), frozenset())
    root = project_root(path) if os.path.exists(path) else None
    if root is not None:
        more = _scan(root)
        imported |= more[0]
        urls |= more[1]
    return DialectEvidence(frozenset(imported), frozenset(urls))
