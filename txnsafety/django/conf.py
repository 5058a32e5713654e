"""``settings.TXNSAFETY``: the Django way to configure the checker.

::

    TXNSAFETY = {
        "ENABLED": True,            # master switch
        "MODE": "log",              # "raise" | "log" | "collect"
        "STRICT": False,            # check models that declare no policy
        "ALLOW": ["Session", "myapp.Counter:TXN103"],   # never reported
        "ISOLATION": {"default": "serializable"},  # when the server, not Django, sets it
        "LIBRARY_PATHS": ["/srv/app/vendor/"],     # frames that are never "your code"
        "BATCH_PATHS": ["/cron/", "/tasks/"],       # lock priority: batch
        "PRIORITY_RULE": "myapp.locks.priority",    # callable or dotted path
    }

Read in ``AppConfig.ready()`` and mapped onto :func:`txnsafety.configure`; keys
that are absent leave the setting as it is.  Under the txnsafety pytest plugin
``MODE`` is ignored: tests raise by default (ini ``txnsafety_mode`` or the
``TXNSAFETY_MODE`` variable decide).
"""
from __future__ import annotations

import os
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from .. import configure
from ..report import test_plugin_active
from . import transactions

KEYS = {"ENABLED", "MODE", "STRICT", "ALLOW", "ISOLATION", "LIBRARY_PATHS", "BATCH_PATHS", "PRIORITY_RULE"}


def apply(conf: Any) -> dict[str, Any]:
    """Validate ``conf`` (the ``TXNSAFETY`` dict) and apply it; returns what was passed to configure()."""
    if conf is None:
        conf = {}
    if not isinstance(conf, dict):
        raise ImproperlyConfigured(f"settings.TXNSAFETY must be a dict, not {type(conf).__name__}")
    unknown = set(conf) - KEYS
    if unknown:
        raise ImproperlyConfigured(
            f"settings.TXNSAFETY: unknown key(s) {', '.join(sorted(unknown))}; "
            f"known: {', '.join(sorted(KEYS))}")
    kwargs: dict[str, Any] = {}
    if "ENABLED" in conf:
        kwargs["enabled"] = bool(conf["ENABLED"])
    if "MODE" in conf and not (test_plugin_active() or "TXNSAFETY_MODE" in os.environ):
        kwargs["mode"] = conf["MODE"]
    if "STRICT" in conf:
        kwargs["strict"] = bool(conf["STRICT"])
    if "ALLOW" in conf:
        allow = conf["ALLOW"]
        if isinstance(allow, str):
            raise ImproperlyConfigured(
                "settings.TXNSAFETY['ALLOW'] is a list of 'ModelGlob[:TXN1nn]' strings")
        kwargs["allow"] = list(allow)
    if "LIBRARY_PATHS" in conf:
        kwargs["library_paths"] = [os.path.abspath(p) for p in conf["LIBRARY_PATHS"]]
    if "BATCH_PATHS" in conf:
        kwargs["batch_paths"] = list(conf["BATCH_PATHS"])
    if "PRIORITY_RULE" in conf:
        rule = conf["PRIORITY_RULE"]
        if isinstance(rule, str):
            try:
                rule = import_string(rule)
            except ImportError as exc:
                raise ImproperlyConfigured(f"settings.TXNSAFETY['PRIORITY_RULE']: {exc}") from exc
        if not callable(rule):
            raise ImproperlyConfigured(
                "settings.TXNSAFETY['PRIORITY_RULE'] must be a callable (path, headers)")
        kwargs["priority_rule"] = rule
    isolation = conf.get("ISOLATION")
    if isolation is not None and not isinstance(isolation, dict):
        raise ImproperlyConfigured(
            "settings.TXNSAFETY['ISOLATION'] maps database aliases to isolation levels")
    try:
        configure(**kwargs)
    except ValueError as exc:
        raise ImproperlyConfigured(f"settings.TXNSAFETY: {exc}") from exc
    transactions.set_isolation_overrides(isolation)
    return kwargs
