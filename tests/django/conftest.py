"""Django for the txnsafety tests: settings, real databases, rows.

Settings are configured when this conftest is imported (no pytest-django): the
example app in fixtures/django_app, SQLite in a temporary directory as
``default``, and the PostgreSQL server of tests/servers.py as ``pg`` (READ
COMMITTED, Django's default) and ``pg_rr`` (REPEATABLE READ) on its own database
``txnsafety_django``; the MariaDB server's aliases are in :mod:`.mariadb`.  Tables
are created with Django's schema editor; every test starts from the same rows.
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from typing import Any, Iterator, Optional
from urllib.parse import urlsplit, urlunsplit

import django
import pytest
from django.conf import settings as dj_settings

from tests import servers

#: Its own database; TXNSAFETY_TEST_DJANGO_DATABASE names another (two checkouts testing at once
#: against one server would otherwise drop each other's tables).
PG_DATABASE = os.environ.get("TXNSAFETY_TEST_DJANGO_DATABASE", "txnsafety_django")


def _pg_url(base: str) -> str:
    parts = urlsplit(base)
    return urlunsplit(parts._replace(path="/" + PG_DATABASE))


_TMP = tempfile.mkdtemp(prefix="txnsafety-django-")
atexit.register(shutil.rmtree, _TMP, True)
SQLITE_PATH = os.path.join(_TMP, "default.sqlite3")

if not dj_settings.configured:
    from fixtures.django_app.settings import build

    from .mariadb import mysql_databases

    _conf = build(
        SQLITE_PATH, _pg_url(servers.POSTGRES_URL),
        # Django's own apps, for their writes (update_last_login) and the cache framework
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "txnsafety.django",
                        "fixtures.django_app"],
        CACHES={"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                            "LOCATION": "txnsafety-tests"}})
    _conf["DATABASES"].update(mysql_databases(servers.MYSQL_URL, PG_DATABASE))
    dj_settings.configure(**_conf)
    django.setup()

from django.db import connections  # noqa: E402

import txnsafety  # noqa: E402
from fixtures.django_app import models as m  # noqa: E402

ALIASES = {"sqlite": "default", "postgresql": "pg"}


def _framework_models() -> tuple[type, ...]:
    from django.contrib.auth.models import Group, Permission, User
    from django.contrib.contenttypes.models import ContentType
    return (ContentType, Permission, Group, User)


def _create_tables(alias: str) -> None:
    connection = connections[alias]
    models = _framework_models() + m.ALL_MODELS
    with connection.schema_editor() as editor:
        existing = set(connection.introspection.table_names())
        for model in reversed(models):
            if model._meta.db_table in existing:
                editor.delete_model(model)
        for model in models:
            editor.create_model(model)
    connection.close()


@pytest.fixture(scope="session")
def sqlite_tables() -> str:
    _create_tables("default")
    return "default"


@pytest.fixture(scope="session")
def pg_tables(postgres_url: str) -> str:
    import psycopg
    from psycopg import errors, sql

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (PG_DATABASE,)).fetchone()
        if not exists:
            try:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(PG_DATABASE)))
            except errors.DuplicateDatabase:
                pass
    _create_tables("pg")
    return "pg"


def reset_rows(alias: str) -> None:
    """Every test's starting point (written outside any checker scope)."""
    with txnsafety.suppress(reason="test data setup"):
        for model in _framework_models()[::-1]:
            model._base_manager.using(alias).all().delete()
        for model in (m.Restaurant, m.Place, m.Account, m.Counter, m.VersionedCounter, m.Doc, m.Wallet,
                      m.Plain, m.Customized, m.Country, m.AuditEntry, m.DailyStat, m.Profile,
                      m.Signup, m.Redemption):
            model._base_manager.using(alias).all().delete()
        m.Account.objects.using(alias).bulk_create(
            [m.Account(pk=i, owner=f"owner{i}", balance=100) for i in (1, 2, 3)])
        m.Counter.objects.using(alias).create(pk=1, value=0)
        m.VersionedCounter.objects.using(alias).create(pk=1, value=0, version=0)
        m.Doc.objects.using(alias).create(pk=1, title="t", body="", version=0)
        m.Wallet.objects.using(alias).create(pk=1, amount=0, account_id=1)
        m.Plain.objects.using(alias).create(pk=1, value=0)
        m.Customized.objects.using(alias).create(pk=1, value=0)
        m.Restaurant.objects.using(alias).create(pk=1, name="r", seats=10)
        m.Country.objects.using(alias).create(pk=1, name="NZ")
        m.AuditEntry.objects.using(alias).create(pk=1, text="created")
        m.DailyStat.objects.using(alias).create(pk=1, total=0)
        m.Profile.objects.using(alias).create(pk=1, visits=0, nickname="ann")
    connections[alias].close()


@pytest.fixture(params=sorted(ALIASES), ids=sorted(ALIASES))
def db(request: pytest.FixtureRequest) -> Iterator[str]:
    """A database alias with fresh rows: SQLite, and PostgreSQL when the server answers."""
    alias = ALIASES[request.param]
    request.getfixturevalue("pg_tables" if alias == "pg" else "sqlite_tables")
    reset_rows(alias)
    yield alias
    for conn in connections.all():
        conn.close()


@pytest.fixture
def sqlite_db(sqlite_tables: str) -> Iterator[str]:
    reset_rows("default")
    yield "default"
    connections["default"].close()


@pytest.fixture
def pg_db(pg_tables: str) -> Iterator[str]:
    reset_rows("pg")
    yield "pg"
    for conn in connections.all():
        conn.close()


@pytest.fixture
def client():
    from django.test import Client
    return Client()


@pytest.fixture
def interleave() -> Iterator[dict]:
    """Set ``fixtures.django_app.views.interleave`` for one test: ``interleave["fn"] = callable``."""
    from fixtures.django_app import views

    slot: dict = {}
    views.interleave = lambda point: slot["fn"](point) if "fn" in slot else None
    yield slot
    views.interleave = None


def assert_each_request_reported(violations: Any, code: Optional[str], n: int, variant: str) -> None:
    """The concurrent counter's verdict: no report for a safe variant; for a racy one, each of
    the ``n`` requests reported once with ``code``, its write site in the view
    (``counter_<variant>``), found from the server's request threads."""
    if code is None:
        assert violations == []
        return
    assert violations.codes() == [code] * n      # every request is reported
    assert len({v.request_id for v in violations}) == n
    assert {v.write_site.function for v in violations} == {f"counter_{variant}"}
