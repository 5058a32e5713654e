"""A project's own locks, declared: the checker counts what runs under them as locked.

Many projects serialise a section with a lock of their own rather than txnsafety's:
a cache ``add()`` of a lock key (memcached and Django's cache succeed for one caller
only), Redis ``SET NX``, a file lock, a ``SELECT GET_LOCK()``.  The checker cannot tell
such a call from any other, so without a word from the project a check-then-act under
it is reported (TXN105), and so is a read-modify-write of a strict model outside a
transaction (TXN102).  Declared, the section holds a lease of its own for the checker
(the same :class:`~txnsafety.context.LeaseLike` a txnsafety lock holds): a check and an
insert both made under it are atomic, a read and a write both made under it are locked.

Two ways, both kept out of the request's hot path (a lease pushed on entry, popped on
exit):

* ``serializing(project_lock)`` (or ``@serializing`` on the context-manager factory):
  entering what the factory returns counts as holding the lock, from the moment the
  project's own ``__enter__`` returned (it got the lock) to its ``__exit__``;
* ``with declared_lock("signup:" + email):`` (or ``@declared_lock(key)`` on a function)
  right after the project's own acquisition, inside it.

The lock's key names it in reports and matches a ``written_with_user_lock(lock_id)``
policy's id.  The checker takes the project's word: the lease counts as verified for as
long as the block runs; whether the lock really excludes others is the project's (its
timeout, its cache's eviction).  Async context managers are not wrapped.
"""
from __future__ import annotations

import functools
import itertools
import uuid
from contextlib import ContextDecorator
from typing import Any, Callable, TypeVar

from .context import enter_lease, exit_lease

_fences = itertools.count(1)
Factory = TypeVar("Factory", bound=Callable[..., Any])


class DeclaredLease:
    """What the checker sees of a declared lock while it is held (a ``LeaseLike``)."""

    __slots__ = ("key", "token", "fence", "held")

    def __init__(self, key: str) -> None:
        self.key = key
        self.token = uuid.uuid4().hex
        self.fence = next(_fences)
        self.held = True

    def is_live(self) -> bool:
        return self.held

    @property
    def verified(self) -> bool:
        """The project declared it: taken at its word while held."""
        return self.held

    def __repr__(self) -> str:
        return f"DeclaredLease(key={self.key!r}, fence={self.fence}, held={self.held})"


class declared_lock(ContextDecorator):
    """``with declared_lock(key):`` — the block is serialised by the project's own lock."""

    def __init__(self, key: Any) -> None:
        self.key = str(key)
        self._lease: DeclaredLease | None = None

    def _recreate_cm(self) -> declared_lock:  # used as a decorator: one lease per call
        return declared_lock(self.key)

    def __enter__(self) -> DeclaredLease:
        lease = self._lease = DeclaredLease(self.key)
        enter_lease(lease)
        return lease

    def __exit__(self, *exc_info: Any) -> None:
        lease, self._lease = self._lease, None
        if lease is not None:
            lease.held = False
            exit_lease(lease)


class _Serialized:
    """The project's context manager, and a declared lease while it is held."""

    __slots__ = ("_inner", "_declared")

    def __init__(self, inner: Any, key: str) -> None:
        self._inner = inner
        self._declared = declared_lock(key)

    def __enter__(self) -> Any:
        value = self._inner.__enter__()  # the project's acquisition: if it raises, nothing is held
        self._declared.__enter__()
        return value

    def __exit__(self, *exc_info: Any) -> Any:
        self._declared.__exit__(*exc_info)
        return self._inner.__exit__(*exc_info)


def serializing(factory: Factory | None = None, *,
                key: str | Callable[..., Any] | None = None) -> Any:
    """Declare a context-manager factory of the project's as a lock: ``serializing(lock)``,
    ``@serializing`` or ``@serializing(key=lambda name: f"signup:{name}")``.

    ``key`` is the lock's name: text, or a function of the factory's arguments; by default
    the factory's name and its first argument (``project_lock:signup``).
    """
    def wrap(inner: Factory) -> Factory:
        @functools.wraps(inner)
        def opened(*args: Any, **kwargs: Any) -> _Serialized:
            if callable(key):
                name = key(*args, **kwargs)
            elif key is not None:
                name = key
            else:
                name = f"{inner.__name__}:{args[0]}" if args else inner.__name__
            return _Serialized(inner(*args, **kwargs), str(name))
        return opened  # type: ignore[return-value]

    return wrap(factory) if factory is not None else wrap
