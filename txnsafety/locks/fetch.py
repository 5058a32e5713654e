"""``fetch_under_lock(entity)``: re-read an entity under its model's user lock.

The seed's ``fetch_under_user_write_lock``: code that read an entity without the
lock and now wants to modify it must re-read it under the lock, or it writes back
stale values (TXN101).  When this context already holds the entity's lock, the
entity was (by the checker's rules) read under it, so the call is a no-op and
returns the same object.  Works for Django, SQLAlchemy and the generic API via
:mod:`txnsafety.adapters`.
"""
from __future__ import annotations

from typing import Any, Generic, TypeVar

from ..context import held_leases
from .api import LockContext, user_write_lock
from .lease import Lease

E = TypeVar("E")


def _lock_id_of(entity: Any) -> str:
    from ..policies import policy_of

    policy = policy_of(type(entity))
    if policy is None or getattr(policy, "lock_id_fn", None) is None:
        raise TypeError(f"txnsafety: fetch_under_lock() needs a model written with a user lock; "
                        f"{type(entity).__qualname__} has "
                        f"{'no policy' if policy is None else 'policy ' + repr(policy.name)}")
    return policy.lock_id(entity)


def _already_held(lock_id: str) -> bool:
    return any(isinstance(lease, Lease) and lease.key == lock_id and lease.kind == "user"
               and lease.is_live() for lease in held_leases())


class FetchUnderLock(Generic[E]):
    """``with fetch_under_lock(user) as user: ...`` (or ``async with``)."""

    def __init__(self, entity: E, **lock_options: Any) -> None:
        self.entity = entity
        self.lock_id = _lock_id_of(entity)
        self._options = lock_options
        self._ctx: LockContext | None = None

    def __enter__(self) -> E:
        if _already_held(self.lock_id):
            return self.entity
        from ..adapters import refetch

        ctx = user_write_lock(self.lock_id, **self._options)
        ctx.__enter__()
        try:
            fresh = refetch(self.entity)
        except BaseException as exc:
            ctx.__exit__(type(exc), exc, exc.__traceback__)
            raise
        self._ctx = ctx
        return fresh

    def __exit__(self, *exc: Any) -> None:
        ctx, self._ctx = self._ctx, None
        if ctx is not None:
            ctx.__exit__(*exc)

    async def __aenter__(self) -> E:
        if _already_held(self.lock_id):
            return self.entity
        from ..adapters import arefetch

        ctx = user_write_lock(self.lock_id, **self._options)
        await ctx.__aenter__()
        try:
            fresh = await arefetch(self.entity)
        except BaseException as exc:
            await ctx.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        self._ctx = ctx
        return fresh

    async def __aexit__(self, *exc: Any) -> None:
        ctx, self._ctx = self._ctx, None
        if ctx is not None:
            await ctx.__aexit__(*exc)


def fetch_under_lock(entity: E, **lock_options: Any) -> FetchUnderLock[E]:
    """Re-read ``entity`` under its model's user write lock; a no-op when already held.

    Raises ``TypeError`` (at the call) when the model has no user-lock policy.
    ``lock_options`` are those of :func:`user_write_lock`.
    """
    return FetchUnderLock(entity, **lock_options)
