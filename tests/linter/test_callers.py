"""A function in application code that only quiet code calls is as quiet as its callers."""
from __future__ import annotations

import textwrap

import pytest

from txnsafety_lint.cli import main

SEED = """\
from django.db import models


class Page(models.Model):
    slug = models.CharField(max_length=50)


def seed_page(slug):
    if not Page.objects.filter(slug=slug).exists():
        Page.objects.create(slug=slug)
"""


def write(root, rel, text):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def run(root, capsys, monkeypatch, *args):
    monkeypatch.chdir(root)
    main([".", "--no-respect-gitignore", *args])
    return capsys.readouterr().out.splitlines()


@pytest.fixture
def project(tmp_path):
    write(tmp_path, "pyproject.toml", "[tool.txnsafety]\n")
    write(tmp_path, "cms/api.py", SEED)
    write(tmp_path, "cms/tests/test_api.py", """\
        from cms.api import seed_page

        def test_seed():
            seed_page("home")
        """)
    write(tmp_path, "cms/test_utils/fixtures.py", """\
        from cms import api

        class PagesFixture:
            def setUp(self):
                api.seed_page("about")
        """)
    return tmp_path


def test_called_only_from_tests_is_quiet(project, capsys, monkeypatch):
    out = run(project, capsys, monkeypatch)
    assert out == ["1 finding not shown: 1 in tests (--include-tests to show them)"]
    assert any("cms/api.py" in line and "TXN105" in line
               for line in run(project, capsys, monkeypatch, "--include-tests"))


def test_one_caller_in_application_code_keeps_it_reported(project, capsys, monkeypatch):
    write(project, "cms/views.py", """\
        from cms.api import seed_page

        def create(request):
            seed_page(request.POST["slug"])
        """)
    out = run(project, capsys, monkeypatch)
    assert any(line.startswith("cms/api.py:") and "TXN105" in line for line in out)


def test_a_callback_handed_on_by_application_code_counts_as_a_caller(project, capsys, monkeypatch):
    write(project, "cms/jobs.py", """\
        from cms.api import seed_page

        HANDLERS = {"seed": seed_page}
        """)
    assert any(line.startswith("cms/api.py:") for line in run(project, capsys, monkeypatch))


def test_called_only_by_a_post_migrate_receiver_is_quiet_as_migrations(tmp_path, capsys, monkeypatch):
    project = tmp_path
    write(project, "pyproject.toml", "[tool.txnsafety]\n")
    write(project, "cms/api.py", SEED)
    write(project, "cms/signals.py", """\
        from django.db.models.signals import post_migrate
        from django.dispatch import receiver

        from cms.api import seed_page


        @receiver(post_migrate)
        def seed_defaults(sender, **kwargs):
            seed_page("home")
        """)
    out = run(project, capsys, monkeypatch)
    assert out == ["1 finding not shown: 1 in migrations (--include-migrations to show them)"]


@pytest.mark.parametrize("decorator", ["@click.command()", "@shop.command(\"seed\")", "@app.cli.command()"])
def test_a_click_command_and_what_only_it_calls_are_quiet_as_commands(tmp_path, capsys, monkeypatch, decorator):
    write(tmp_path, "pyproject.toml", "[tool.txnsafety]\n")
    write(tmp_path, "cms/api.py", SEED)
    write(tmp_path, "cms/admin_tools.py", f"""\
        import click

        from cms.api import Page, seed_page

        shop = app = None


        {decorator}
        def seed_defaults():
            seed_page("home")
            if not Page.objects.filter(slug="about").exists():
                Page.objects.create(slug="about")
        """)
    out = run(tmp_path, capsys, monkeypatch)
    assert out == ["2 findings not shown: 2 in commands (--include-commands to show them)"]


STARTUP_HOOKS = {
    "django-ready": ("cms/apps.py", """\
        from django.apps import AppConfig


        class CmsConfig(AppConfig):
            name = "cms"

            def ready(self):
                from cms.api import seed_page
                seed_page("home")
        """),
    "flask-factory": ("cms/app.py", """\
        from flask import Flask

        from cms.api import seed_page


        def create_app():
            app = Flask(__name__)
            seed_page("home")
            return app
        """),
    "fastapi-lifespan": ("cms/main.py", """\
        from contextlib import asynccontextmanager

        from fastapi import FastAPI

        from cms.api import seed_page


        @asynccontextmanager
        async def lifespan(app):
            seed_page("home")
            yield


        app = FastAPI(lifespan=lifespan)
        """),
    "on-event-startup": ("cms/main.py", """\
        from fastapi import FastAPI

        from cms.api import seed_page

        app = FastAPI()


        @app.on_event("startup")
        def seed():
            seed_page("home")
        """),
    "aiohttp-on-startup": ("cms/main.py", """\
        from aiohttp import web

        from cms.api import seed_page


        async def seed(app):
            seed_page("home")


        app = web.Application()
        app.on_startup.append(seed)
        """),
    "called-at-import": ("cms/main.py", """\
        from cms.api import seed_page


        def configure_server():
            seed_page("home")


        configure_server()
        """),
}


@pytest.mark.parametrize("hook", sorted(STARTUP_HOOKS))
def test_what_only_startup_code_calls_is_quiet_as_startup(tmp_path, capsys, monkeypatch, hook):
    # each process runs it once before serving: two copies meet only when two processes boot
    rel, text = STARTUP_HOOKS[hook]
    write(tmp_path, "pyproject.toml", "[tool.txnsafety]\n")
    write(tmp_path, "cms/api.py", SEED)
    write(tmp_path, rel, text)
    assert run(tmp_path, capsys, monkeypatch) == [
        "1 finding not shown: 1 in startup (--include-startup to show them)"]
    assert any(line.startswith("cms/api.py:") and "TXN105" in line
               for line in run(tmp_path, capsys, monkeypatch, "--include-startup"))


def test_a_function_called_at_startup_and_by_a_view_stays_reported(tmp_path, capsys, monkeypatch):
    rel, text = STARTUP_HOOKS["django-ready"]
    write(tmp_path, "pyproject.toml", "[tool.txnsafety]\n")
    write(tmp_path, "cms/api.py", SEED)
    write(tmp_path, rel, text)
    write(tmp_path, "cms/views.py", """\
        from cms.api import seed_page


        def add_page(request):
            seed_page(request.POST["slug"])
        """)
    assert any(line.startswith("cms/api.py:") for line in run(tmp_path, capsys, monkeypatch))


def test_a_function_handed_on_at_module_level_is_not_called_at_import(tmp_path, capsys, monkeypatch):
    # ``path("seed/", seed_view)``: the view is referenced at import, called per request
    write(tmp_path, "pyproject.toml", "[tool.txnsafety]\n")
    write(tmp_path, "cms/api.py", SEED)
    write(tmp_path, "cms/urls.py", """\
        from django.urls import path

        from cms.api import seed_page

        urlpatterns = [path("seed/<slug>/", seed_page)]
        """)
    assert any(line.startswith("cms/api.py:") for line in run(tmp_path, capsys, monkeypatch))


def test_a_method_named_ready_outside_an_app_config_is_not_startup(tmp_path, capsys, monkeypatch):
    write(tmp_path, "pyproject.toml", "[tool.txnsafety]\n")
    write(tmp_path, "cms/api.py", SEED)
    write(tmp_path, "cms/orders.py", """\
        from cms.api import seed_page


        class Order:
            def ready(self):
                seed_page(self.slug)
        """)
    assert any(line.startswith("cms/api.py:") for line in run(tmp_path, capsys, monkeypatch))


def test_a_command_decorator_in_a_module_without_a_cli_library_is_not_a_command(tmp_path, capsys, monkeypatch):
    # ``@bot.command()`` of a chat bot runs per message, beside every other message
    write(tmp_path, "pyproject.toml", "[tool.txnsafety]\n")
    write(tmp_path, "cms/api.py", SEED)
    write(tmp_path, "cms/bot.py", """\
        from cms.api import seed_page

        bot = None


        @bot.command()
        def seed(ctx):
            seed_page(ctx.slug)
        """)
    assert any(line.startswith("cms/api.py:") for line in run(tmp_path, capsys, monkeypatch))


def test_through_a_chain_of_quiet_callers(project, capsys, monkeypatch):
    write(project, "cms/setup_data.py", """\
        from cms.api import seed_page

        def seed_all():
            seed_page("home")
        """)
    write(project, "cms/tests/test_setup.py", """\
        from cms.setup_data import seed_all

        def test_all():
            seed_all()
        """)
    assert run(project, capsys, monkeypatch) == [
        "1 finding not shown: 1 in tests (--include-tests to show them)"]


def test_a_name_defined_twice_is_not_judged_by_its_calls(project, capsys, monkeypatch):
    write(project, "shop/api.py", """\
        def seed_page(slug):
            return slug
        """)
    assert any(line.startswith("cms/api.py:") for line in run(project, capsys, monkeypatch))


def test_a_function_nothing_references_is_an_entry_point(tmp_path, capsys, monkeypatch):
    write(tmp_path, "pyproject.toml", "[tool.txnsafety]\n")
    write(tmp_path, "cms/api.py", SEED)
    assert any(line.startswith("cms/api.py:") for line in run(tmp_path, capsys, monkeypatch))


def test_a_method_called_only_by_a_handler_connected_to_post_migrate_is_quiet(tmp_path, capsys, monkeypatch):
    write(tmp_path, "pyproject.toml", "[tool.txnsafety]\n")
    write(tmp_path, "lang/apps.py", """\
        from django.apps import AppConfig
        from django.db.models.signals import post_migrate


        class LangConfig(AppConfig):
            def ready(self):
                from lang.models import setup_lang
                post_migrate.connect(setup_lang, sender=self)
        """)
    write(tmp_path, "lang/models.py", """\
        from django.db import models


        class Plural(models.Model):
            kind = models.IntegerField()


        class LanguageManager(models.Manager):
            def setup(self):
                self._fixup_plural_kinds()

            def _fixup_plural_kinds(self):
                if not Plural.objects.filter(kind=2).exists():
                    Plural.objects.create(kind=2)


        def setup_lang(sender, **kwargs):
            Language.objects.setup()
        """)
    assert run(tmp_path, capsys, monkeypatch) == [
        "1 finding not shown: 1 in migrations (--include-migrations to show them)"]


def test_a_job_called_only_by_a_command_and_its_tests_stays_reported(tmp_path, capsys, monkeypatch):
    """A worker or scheduler runs a task again and again beside requests: a management
    command that runs it once by hand does not make it one-off code."""
    write(tmp_path, "pyproject.toml", "[tool.txnsafety]\n")
    write(tmp_path, "cms/tasks.py", SEED)
    write(tmp_path, "cms/management/commands/seed.py", """\
        from cms.tasks import seed_page

        def handle():
            seed_page("home")
        """)
    write(tmp_path, "cms/tests/test_tasks.py", """\
        from cms.tasks import seed_page

        def test_seed():
            seed_page("home")
        """)
    out = run(tmp_path, capsys, monkeypatch)
    assert any("cms/tasks.py" in line and "TXN105" in line for line in out), out


def test_a_function_decorated_as_a_task_stays_reported(project, capsys, monkeypatch):
    write(project, "cms/api.py", SEED.replace("def seed_page", "@shared_task\ndef seed_page"))
    out = run(project, capsys, monkeypatch)
    assert any("cms/api.py" in line and "TXN105" in line for line in out), out
