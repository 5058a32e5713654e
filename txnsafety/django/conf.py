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
        "LOG_LEVEL": "WARNING",     # of log mode's record per report ("ERROR": Sentry events)
        "SAMPLE_RATE": 1.0,         # the share of requests checked (0.1 in production: a tenth)
        "SAMPLER": "myapp.checks.sampler",          # (method, path, headers) -> share; callable or dotted path
    }

Read in ``AppConfig.ready()`` and mapped onto :func:`txnsafety.configure`; keys
that are absent leave the setting as it is, except ``SAMPLER``: absent or None, no
sampler (so that leaving an ``override_settings`` block that set one removes it).
Under the txnsafety pytest plugin ``MODE`` is ignored: tests raise by default (ini
``txnsafety_mode`` or the ``TXNSAFETY_MODE`` variable decide).
"""
from __future__ import annotations

import os
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from .. import configure
from ..config import MODE_VARIABLE, MODES, ConfigurationError, settings, validate
from ..report import test_plugin_active
from . import transactions

KEYS = {"ENABLED", "MODE", "STRICT", "ALLOW", "ISOLATION", "LIBRARY_PATHS", "BATCH_PATHS", "PRIORITY_RULE",
        "LOG_LEVEL", "SAMPLE_RATE", "SAMPLER"}

#: What each key takes: the hint of system check txnsafety.E001.
HINTS = {
    None: 'TXNSAFETY is a dict, e.g. {"MODE": "log", "STRICT": False, "ALLOW": []}; '
          f"its keys: {', '.join(sorted(KEYS))}",
    "MODE": f"MODE is one of {', '.join(repr(m) for m in MODES)}",
    "ALLOW": 'ALLOW is a list of "ModelGlob" or "ModelGlob:TXN1nn" strings, e.g. ["Session", "shop.Counter:TXN103"]',
    "ISOLATION": 'ISOLATION maps database aliases to isolation levels, e.g. {"default": "serializable"}',
    "LIBRARY_PATHS": "LIBRARY_PATHS is a list of directory paths",
    "BATCH_PATHS": 'BATCH_PATHS is a list of URL path prefixes, e.g. ["/cron/"]',
    "LOG_LEVEL": 'LOG_LEVEL is a logging level, e.g. "ERROR" (Sentry events) or "WARNING" (the default)',
    "SAMPLE_RATE": "SAMPLE_RATE is the share of requests checked, a number from 0 to 1 (1: every request)",
    "PRIORITY_RULE": 'PRIORITY_RULE is a callable (path, headers) -> txnsafety.Priority, or its dotted path',
    "SAMPLER": "SAMPLER is a callable (method, path, headers) -> the share of such requests checked (0 to 1, True, "
               "False, or None for SAMPLE_RATE), or its dotted path",
}


class SettingError(ImproperlyConfigured):
    """A bad ``settings.TXNSAFETY``; ``key`` is the offending key (None: the value itself)."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message, key)
        self.key = key

    def __str__(self) -> str:
        return str(self.args[0])

    @property
    def hint(self) -> str:
        return HINTS.get(self.key) or HINTS[None]


def parse(conf: Any) -> tuple[dict[str, Any], dict[str, str] | None]:
    """Validate ``conf`` (the ``TXNSAFETY`` value) without applying it.

    Returns the arguments for :func:`txnsafety.configure` and the isolation
    overrides; raises :class:`SettingError` naming the key.
    """
    if conf is None:
        conf = {}
    if not isinstance(conf, dict):
        raise SettingError(f"settings.TXNSAFETY must be a dict, not {type(conf).__name__}")
    unknown = set(conf) - KEYS
    if unknown:
        raise SettingError(
            f"settings.TXNSAFETY: unknown key(s) {', '.join(sorted(map(str, unknown)))}; "
            f"known: {', '.join(sorted(KEYS))}")
    kwargs: dict[str, Any] = {}
    if "ENABLED" in conf:
        kwargs["enabled"] = bool(conf["ENABLED"])
    if "MODE" in conf:
        if conf["MODE"] not in MODES:
            raise SettingError(f"settings.TXNSAFETY['MODE'] is {conf['MODE']!r}, not a mode", "MODE")
        if not (test_plugin_active() or os.environ.get(MODE_VARIABLE, "").strip()):
            kwargs["mode"] = conf["MODE"]
    if "STRICT" in conf:
        kwargs["strict"] = bool(conf["STRICT"])
    if "ALLOW" in conf:
        allow = conf["ALLOW"]
        if isinstance(allow, str) or not isinstance(allow, (list, tuple)):
            raise SettingError("settings.TXNSAFETY['ALLOW'] is a list of 'ModelGlob[:TXN1nn]' strings", "ALLOW")
        kwargs["allow"] = list(allow)
    for key, name in (("LIBRARY_PATHS", "library_paths"), ("BATCH_PATHS", "batch_paths")):
        if key in conf:
            value = conf[key]
            if isinstance(value, str) or not isinstance(value, (list, tuple)) \
                    or not all(isinstance(v, str) for v in value):
                raise SettingError(f"settings.TXNSAFETY[{key!r}] is a list of strings, not {value!r}", key)
            kwargs[name] = [os.path.abspath(p) for p in value] if key == "LIBRARY_PATHS" else list(value)
    if "LOG_LEVEL" in conf:
        kwargs["log_level"] = conf["LOG_LEVEL"]
    if "SAMPLE_RATE" in conf:
        kwargs["sample_rate"] = conf["SAMPLE_RATE"]
    if "PRIORITY_RULE" in conf:
        kwargs["priority_rule"] = _callable(conf["PRIORITY_RULE"], "PRIORITY_RULE", "(path, headers)")
    if conf.get("SAMPLER") is not None:
        kwargs["sampler"] = _callable(conf["SAMPLER"], "SAMPLER", "(method, path, headers)")
    isolation = conf.get("ISOLATION")
    if isolation is not None and not isinstance(isolation, dict):
        raise SettingError(
            "settings.TXNSAFETY['ISOLATION'] maps database aliases to isolation levels", "ISOLATION")
    try:
        validate(**kwargs)
    except ConfigurationError as exc:
        key = "ALLOW" if "allow" in str(exc) else "LOG_LEVEL" if "log_level" in str(exc) else \
            "SAMPLE_RATE" if "sample_rate" in str(exc) else "SAMPLER" if "sampler" in str(exc) else None
        raise SettingError(f"settings.TXNSAFETY: {exc}", key) from exc
    return kwargs, isolation


def _callable(value: Any, key: str, takes: str) -> Any:
    """The callable a key names, given as itself or as its dotted path; else a SettingError naming ``key``."""
    if isinstance(value, str):
        try:
            value = import_string(value)
        except ImportError as exc:
            raise SettingError(f"settings.TXNSAFETY[{key!r}]: {exc}", key) from exc
    if not callable(value):
        raise SettingError(f"settings.TXNSAFETY[{key!r}] must be a callable {takes}, or its dotted path", key)
    return value


def apply(conf: Any) -> dict[str, Any]:
    """Validate ``conf`` (the ``TXNSAFETY`` dict) and apply it; returns what was passed to configure()."""
    kwargs, isolation = parse(conf)
    configure(**kwargs)
    if "sampler" not in kwargs:  # TXNSAFETY names the sampler, or there is none
        settings.sampler = None
    transactions.set_isolation_overrides(isolation)
    return kwargs
