"""``INSTALLED_APPS = [..., "txnsafety.django"]``."""
from __future__ import annotations

import logging

from django.apps import AppConfig
from django.core.signals import setting_changed

from .checks import check_middleware  # noqa: F401  (its old home)

log = logging.getLogger("txnsafety")


class TxnSafetyConfig(AppConfig):
    name = "txnsafety.django"
    label = "txnsafety"
    verbose_name = "txnsafety (lost-write checker)"
    default = True

    def ready(self) -> None:
        from django.conf import settings as dj_settings

        from . import conf

        from . import checks

        try:
            conf.apply(getattr(dj_settings, "TXNSAFETY", None))
        except conf.SettingError as exc:
            # Not a traceback out of ready(): system check txnsafety.E001 shows it with a
            # hint (manage.py check, runserver, migrate, test); servers that run no checks
            # get this log line.  The checker keeps its defaults meanwhile.
            log.error("txnsafety: %s (%s); the checker keeps its defaults", exc, exc.hint)
        activate()
        setting_changed.connect(_on_setting_changed, dispatch_uid="txnsafety.django.setting_changed")
        checks.register()


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
    register_refetcher(is_model, refetch, arefetch)
    _activated = True


def _on_setting_changed(setting: str, value: object, **kwargs: object) -> None:
    from . import conf, transactions
    if setting == "TXNSAFETY":
        try:
            conf.apply(value)
        except conf.SettingError as exc:  # shown by check txnsafety.E001
            log.error("txnsafety: %s (%s); the checker keeps its settings", exc, exc.hint)
    elif setting == "DATABASES":
        transactions.forget_verdicts()
