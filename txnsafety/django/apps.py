"""``INSTALLED_APPS = [..., "txnsafety.django"]``."""
from __future__ import annotations

from django.apps import AppConfig, apps
from django.core import checks
from django.core.signals import setting_changed


class TxnSafetyConfig(AppConfig):
    name = "txnsafety.django"
    label = "txnsafety"
    verbose_name = "txnsafety (lost-write checker)"
    default = True

    def ready(self) -> None:
        from django.conf import settings as dj_settings

        from . import conf

        conf.apply(getattr(dj_settings, "TXNSAFETY", None))
        activate()
        setting_changed.connect(_on_setting_changed, dispatch_uid="txnsafety.django.setting_changed")
        checks.register(check_middleware, "txnsafety")


_activated = False


def activate() -> None:
    """Install the ORM hooks and the refetcher (idempotent).

    Called by the app's ``ready()``, and by the middleware for projects that use
    the middleware without listing the app (then ``TXNSAFETY`` is not read).
    """
    global _activated
    from .. import hops
    from ..adapters import register_refetcher
    from . import hooks
    from .refetch import arefetch, is_model, refetch

    hooks.install()
    hops.install()  # sites of the async ORM point at the awaiting view, not into asgiref
    if _activated:
        return
    hooks.wrap_overridden_from_db(apps.get_models(include_auto_created=True))
    register_refetcher(is_model, refetch, arefetch)
    _activated = True


def _on_setting_changed(setting: str, value: object, **kwargs: object) -> None:
    from . import conf, transactions
    if setting == "TXNSAFETY":
        conf.apply(value)
    elif setting == "DATABASES":
        transactions.forget_verdicts()


MIDDLEWARE_PATH = "txnsafety.django.middleware.TxnSafetyMiddleware"


def check_middleware(app_configs: object = None, **kwargs: object) -> list[checks.CheckMessage]:
    """txnsafety.W001: the app is installed but no request opens a checker scope."""
    from django.conf import settings as dj_settings
    if MIDDLEWARE_PATH in (getattr(dj_settings, "MIDDLEWARE", None) or ()):
        return []
    return [checks.Warning(
        "txnsafety.django is installed but its middleware is not in MIDDLEWARE: requests are not checked",
        hint=f"Add {MIDDLEWARE_PATH!r} at the top of MIDDLEWARE.", id="txnsafety.W001")]
