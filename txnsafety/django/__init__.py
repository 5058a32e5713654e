"""txnsafety's Django integration.

::

    INSTALLED_APPS = [..., "txnsafety.django"]
    MIDDLEWARE = ["txnsafety.django.middleware.TxnSafetyMiddleware", ...]
    TXNSAFETY = {"MODE": "log", "STRICT": False, "ALLOW": [], "ENABLED": True}

Policies are the decorators of :mod:`txnsafety` applied to model classes
(abstract and proxy models included).  See ``docs/django.md``.
"""
from __future__ import annotations

from typing import Any

__all__ = ["TxnSafetyMiddleware", "VersionConflict", "aversioned_save", "current_transaction",
           "install", "versioned_save"]


def __getattr__(name: str) -> Any:  # lazy: importing the package must not need configured settings
    if name == "TxnSafetyMiddleware":
        from .middleware import TxnSafetyMiddleware
        return TxnSafetyMiddleware
    if name in ("VersionConflict", "versioned_save", "aversioned_save"):
        from . import versioning
        return getattr(versioning, name)
    if name == "install":
        from .hooks import install
        return install
    if name == "current_transaction":
        from .transactions import transaction_for
        return transaction_for
    raise AttributeError(f"module 'txnsafety.django' has no attribute {name!r}")
