"""Which backend a URL's scheme builds: the built-in table and ``register_backend``.

Why a module of its own: every backend imports :mod:`txnsafety.locks.backend`
(the base class), so the scheme table cannot live there without an import cycle.
Built-in backends are named by module and class and imported only when a URL
needs them, so a missing client library (redis, psycopg) matters only when used.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Callable
from urllib.parse import urlsplit

if TYPE_CHECKING:  # pragma: no cover
    from .backend import Backend

#: scheme -> (module under txnsafety.locks, class name)
_BUILTIN: dict[str, tuple[str, str]] = {
    "memory": ("memory", "MemoryBackend"),
    "redis": ("redis_backend", "RedisBackend"),
    "rediss": ("redis_backend", "RedisBackend"),
    "unix": ("redis_backend", "RedisBackend"),
    "redis+sentinel": ("redis_backend", "RedisBackend"),
    "rediss+sentinel": ("redis_backend", "RedisBackend"),
    "redis+cluster": ("redis_backend", "RedisBackend"),
    "rediss+cluster": ("redis_backend", "RedisBackend"),
    "memcached": ("memcached_backend", "MemcachedBackend"),
    "memcache": ("memcached_backend", "MemcachedBackend"),
    "postgresql": ("postgres_backend", "PostgresBackend"),
    "postgres": ("postgres_backend", "PostgresBackend"),
}

_factories: dict[str, Callable[[str], "Backend"]] = {}


def register_backend(scheme: str, factory: Callable[[str], "Backend"]) -> None:
    """Make ``scheme://`` URLs build backends with ``factory(url)``."""
    _factories[scheme] = factory


def known_scheme(url: str) -> bool:
    """True when some backend handles ``url``'s scheme (without importing its client)."""
    scheme = urlsplit(url).scheme
    return scheme in _factories or scheme in _BUILTIN


def backend_from_url(url: str) -> "Backend":
    """Build a backend for ``url`` (``memory://``, ``redis://``, ``memcached://``, ``postgresql://``)."""
    scheme = urlsplit(url).scheme
    factory = _factories.get(scheme)
    if factory is None:
        if scheme not in _BUILTIN:
            raise ValueError(f"txnsafety: no lock backend for URL scheme {scheme!r} "
                             f"(known: {', '.join(sorted(set(_BUILTIN) | set(_factories)))})")
        module, name = _BUILTIN[scheme]
        factory = getattr(importlib.import_module(f"{__package__}.{module}"), name)
        register_backend(scheme, factory)
    return factory(url)
