"""A small real Django project in a temporary directory, run through its ``manage.py``."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OURS = "txnsafety.django.middleware.TxnSafetyMiddleware"
SESSION = "django.contrib.sessions.middleware.SessionMiddleware"
AUTH = "django.contrib.auth.middleware.AuthenticationMiddleware"
COMMON = "django.middleware.common.CommonMiddleware"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "TXNSAFETY_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


def manage(tmp_path: Path, *args: str, txnsafety: object = None, middleware: list[str] | None = None,
           env: dict[str, str] | None = None, extra: str = "") -> subprocess.CompletedProcess:
    (tmp_path / "shop").mkdir(exist_ok=True)
    (tmp_path / "shop" / "__init__.py").write_text("")
    (tmp_path / "shop" / "models.py").write_text(textwrap.dedent("""
        from django.db import models
        import txnsafety

        @txnsafety.written_in_transaction()
        class Account(models.Model):
            balance = models.IntegerField(default=0)
    """))
    settings = {
        "SECRET_KEY": "x", "USE_TZ": True, "DEFAULT_AUTO_FIELD": "django.db.models.AutoField",
        "INSTALLED_APPS": ["django.contrib.contenttypes", "django.contrib.auth", "django.contrib.sessions",
                           "txnsafety.django", "shop"],
        "MIDDLEWARE": [OURS, SESSION, COMMON, AUTH] if middleware is None else middleware,
        "DATABASES": {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(tmp_path / "db.sqlite3")}},
        "ROOT_URLCONF": "urls",
    }
    lines = [f"{name} = {value!r}" for name, value in settings.items()]
    if txnsafety is not None:
        lines.append(f"TXNSAFETY = {txnsafety!r}")
    lines.append(extra)
    (tmp_path / "settings.py").write_text("\n".join(lines) + "\n")
    (tmp_path / "urls.py").write_text("urlpatterns = []\n")
    (tmp_path / "manage.py").write_text(textwrap.dedent("""
        import os, sys
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")
        from django.core.management import execute_from_command_line
        execute_from_command_line(sys.argv)
    """))
    return subprocess.run([sys.executable, "manage.py", *args], cwd=tmp_path, capture_output=True, text=True,
                          env=env or _env(), timeout=120)
