"""Django system checks (``manage.py check``): misconfiguration shown where Django users look.

=================  ==========================================================================
``txnsafety.E001``  ``settings.TXNSAFETY`` is not valid (the checker then keeps its defaults)
``txnsafety.W001``  the app is installed but its middleware is not in ``MIDDLEWARE``
``txnsafety.W002``  the middleware comes after middleware that touches the database, whose
                    reads and writes then run outside any request scope
``txnsafety.W003``  an ``ALLOW`` entry matches no installed model (a typo allows nothing)
``txnsafety.W004``  an ``ALLOW`` entry names a code that does not exist
=================  ==========================================================================

Silence one with ``SILENCED_SYSTEM_CHECKS = ["txnsafety.W002"]`` like any Django check.
The checks read the settings as they are now (``override_settings`` included), not
what ``ready()`` applied.
"""
from __future__ import annotations

import fnmatch
from typing import Any

from django.core import checks

MIDDLEWARE_PATH = "txnsafety.django.middleware.TxnSafetyMiddleware"

#: Middleware of Django (and common third-party apps) that reads or writes the database
#: while handling a request: placed before ours, its queries run outside the request scope.
DATABASE_MIDDLEWARE = frozenset({
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.auth.middleware.RemoteUserMiddleware",
    "django.contrib.auth.middleware.PersistentRemoteUserMiddleware",
    "django.contrib.sites.middleware.CurrentSiteMiddleware",
    "django.contrib.redirects.middleware.RedirectFallbackMiddleware",
    "django.contrib.flatpages.middleware.FlatpageFallbackMiddleware",
    "django.middleware.cache.UpdateCacheMiddleware",
    "django.middleware.cache.FetchFromCacheMiddleware",
    "django.middleware.cache.CacheMiddleware",
    "django.middleware.transaction.TransactionMiddleware",
    "allauth.account.middleware.AccountMiddleware",
    "django_otp.middleware.OTPMiddleware",
    "axes.middleware.AxesMiddleware",
})


def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """E001: ``TXNSAFETY`` parses; W003/W004: its ``ALLOW`` entries name real models and codes."""
    from django.conf import settings as dj_settings

    from .conf import SettingError, parse
    value = getattr(dj_settings, "TXNSAFETY", None)
    try:
        parsed, _ = parse(value)
    except SettingError as exc:
        return [checks.Error(str(exc), hint=exc.hint, obj="settings.TXNSAFETY", id="txnsafety.E001")]
    return _check_allow(parsed.get("allow") or ())


def _check_allow(allow: Any) -> list[checks.CheckMessage]:
    from django.apps import apps

    from ..codes import CODES
    names: set[str] = set()
    for model in apps.get_models(include_auto_created=True):
        names.update((model._meta.label, model.__name__, f"{model.__module__}.{model.__qualname__}"))
    messages: list[checks.CheckMessage] = []
    for entry in allow:
        pattern, _, code = entry.partition(":")
        pattern, code = pattern.strip(), code.strip()
        if not any(fnmatch.fnmatchcase(name, pattern) for name in names):
            messages.append(checks.Warning(
                f"settings.TXNSAFETY['ALLOW'] entry {entry!r} matches no installed model",
                hint="Name a model as 'Model', 'app_label.Model' or a glob of them; a typo here allows "
                     "nothing. (An entry for a non-Django model, e.g. SQLAlchemy's: silence txnsafety.W003.)",
                obj="settings.TXNSAFETY", id="txnsafety.W003"))
        if code and code not in CODES:
            messages.append(checks.Warning(
                f"settings.TXNSAFETY['ALLOW'] entry {entry!r} names {code}, which is not a txnsafety code",
                hint=f"Known codes: {', '.join(CODES)}.", obj="settings.TXNSAFETY", id="txnsafety.W004"))
    return messages


def check_middleware(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """W001: the middleware is missing; W002: it comes after middleware that touches the database."""
    from django.conf import settings as dj_settings
    middleware = list(getattr(dj_settings, "MIDDLEWARE", None) or ())
    if MIDDLEWARE_PATH not in middleware:
        return [checks.Warning(
            "txnsafety.django is installed but its middleware is not in MIDDLEWARE: requests are not checked",
            hint=f"Add {MIDDLEWARE_PATH!r} at the top of MIDDLEWARE.", id="txnsafety.W001")]
    before = middleware[:middleware.index(MIDDLEWARE_PATH)]
    touching = [m for m in before if m in DATABASE_MIDDLEWARE]
    if not touching:
        return []
    return [checks.Warning(
        f"{MIDDLEWARE_PATH} comes after {', '.join(touching)}, which touch(es) the database: "
        "those reads and writes run outside the request's checker scope and are not checked",
        hint=f"Move {MIDDLEWARE_PATH!r} to the top of MIDDLEWARE.", obj="settings.MIDDLEWARE",
        id="txnsafety.W002")]


def register() -> None:
    """Called by the app's ``ready()``."""
    checks.register(check_settings, "txnsafety")
    checks.register(check_middleware, "txnsafety")
