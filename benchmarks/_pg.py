"""``--postgres URL`` for the checker benchmarks: each process gets a private database.

The benchmarks run on SQLite by default.  Given a PostgreSQL server (the CI's:
``postgresql://txnsafety:txnsafety@127.0.0.1:5432/txnsafety``), each process, the
parent and every pooled worker, creates a database of its own on it
(``txnsafety_bench_<pid>_<random>``) and drops it when it exits, so runs of several
sessions at once never share a table.  The option is read from ``sys.argv`` before
Django is configured (``bench_django`` configures it at import); the benchmark's
parser declares it too (:func:`add_option`), so workers get it on their command line.
Needs a role that may create databases.
"""
from __future__ import annotations

import argparse
import atexit
import secrets
import sys
from urllib.parse import urlsplit, urlunsplit


def add_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--postgres", metavar="URL",
                        help="run on PostgreSQL (a private database per process) instead of SQLite")


def url_from_argv(argv: list[str] | None = None) -> str | None:
    """The ``--postgres`` value on the command line (``--postgres URL`` or ``--postgres=URL``), or None."""
    argv = sys.argv[1:] if argv is None else argv
    found = None
    for i, arg in enumerate(argv):  # the last one wins, as argparse does
        if arg == "--postgres" and i + 1 < len(argv):
            found = argv[i + 1]
        elif arg.startswith("--postgres="):
            found = arg.split("=", 1)[1]
    return found


_created: dict[str, str] = {}


def private_database(url: str) -> str:
    """Create this process's database on the server of ``url`` (once); return its URL."""
    if url in _created:
        return _created[url]
    import psycopg
    name = f"txnsafety_bench_{secrets.token_hex(4)}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(url)
    private = urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))

    def drop() -> None:
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        except Exception as exc:  # the server went away: nothing left to tidy
            sys.stderr.write(f"could not drop the benchmark database {name}: {exc}\n")

    atexit.register(drop)
    _created[url] = private
    return private


def sqlalchemy_url(url: str) -> str:
    """The URL for SQLAlchemy's psycopg (3) dialect."""
    scheme, rest = url.split("://", 1)
    return ("postgresql+psycopg" if scheme in ("postgresql", "postgres") else scheme) + "://" + rest
