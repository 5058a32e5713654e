"""File roles: what is quiet by default (tests, fixtures, migrations, one-off scripts)."""
from __future__ import annotations

import pytest

from txnsafety_lint.selection.roles import QUIET, FileRole, QuietGroup, classify, parse_role


@pytest.mark.parametrize("path, role", [
    ("shop/views.py", FileRole.APP),
    ("shop/test_views.py", FileRole.TEST),
    ("shop/views_test.py", FileRole.TEST),
    ("shop/tests.py", FileRole.TEST),
    ("conftest.py", FileRole.TEST),
    ("shop/tests/helpers.py", FileRole.TEST),
    ("cms/test_utils/testcases.py", FileRole.TEST),             # a package's test helpers
    ("shop/testutils/db.py", FileRole.TEST),
    ("test/integration/run.py", FileRole.TEST),
    ("shop/fixtures/accounts.py", FileRole.FIXTURE),
    ("shop/factories.py", FileRole.FIXTURE),
    ("shop/factory.py", FileRole.FIXTURE),
    ("shop/account_factories.py", FileRole.FIXTURE),
    ("shop/migrations/0002_backfill.py", FileRole.MIGRATION),
    ("alembic/versions/abc123_add.py", FileRole.MIGRATION),
    ("db/alembic/versions/abc123_add.py", FileRole.MIGRATION),
    ("migrations/versions/abc123_add.py", FileRole.MIGRATION),
    ("ckanext/shop/migration/shop/versions/19a6_add.py", FileRole.MIGRATION),    # CKAN's alembic layout
    ("setup.py", FileRole.SCRIPT),
    ("manage.py", FileRole.SCRIPT),
    ("docs/conf.py", FileRole.SCRIPT),
    ("scripts/backfill.py", FileRole.SCRIPT),
    ("shop/scripts/nightly.py", FileRole.APP),          # only the top-level scripts/ folder
    ("superset/examples/birth_names.py", FileRole.SCRIPT),  # demo data loaders, example apps
    ("examples/flaskr/app.py", FileRole.SCRIPT),
    (".github/upgrade-test/check.py", FileRole.SCRIPT),           # runs in CI only
    ("shop/example_views.py", FileRole.APP),
    ("shop/setup.py", FileRole.APP),
    ("shop/management/commands/close_accounts.py", FileRole.COMMAND),
    ("shop/__main__.py", FileRole.COMMAND),
    ("shop/cli.py", FileRole.COMMAND),                    # Click / Flask commands
    ("ckanext/tracking/cli/tracking.py", FileRole.COMMAND),
    ("shop/client.py", FileRole.APP),
    ("shop/tests/migrations/test_0002.py", FileRole.TEST),
    ("./shop/tests.py", FileRole.TEST),
    ("shop\\migrations\\0001_initial.py", FileRole.MIGRATION),
    ("shop/contest.py", FileRole.APP),
    ("shop/latest_tests_report.py", FileRole.APP),
])
def test_classify(path, role):
    assert classify(path) is role


def test_app_is_reported_the_rest_is_quiet():
    assert FileRole.APP not in QUIET
    assert QUIET[FileRole.TEST] is QUIET[FileRole.FIXTURE] is QuietGroup.TESTS
    assert QUIET[FileRole.MIGRATION] is QuietGroup.MIGRATIONS
    assert QUIET[FileRole.SCRIPT] is QuietGroup.SCRIPTS
    assert QUIET[FileRole.COMMAND] is QuietGroup.COMMANDS


def test_overrides_win_last_match():
    overrides = {"scripts/": FileRole.SCRIPT, "scripts/cron_*.py": FileRole.APP}
    assert classify("scripts/cron_close.py", overrides) is FileRole.APP
    assert classify("scripts/once.py", overrides) is FileRole.SCRIPT
    assert classify("fixtures/lab/views.py", {"fixtures/**": parse_role("app")}) is FileRole.APP
    with pytest.raises(ValueError, match="unknown role 'tset'"):
        parse_role("tset")
