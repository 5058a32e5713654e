"""The lock service: the seed's user write lock, on memory, Redis, memcached or PostgreSQL.

::

    from txnsafety.locks import user_write_lock, global_lock, fetch_under_lock, configure

    configure(url="redis://127.0.0.1:6379/0")
    with user_write_lock(user.id) as lease:        # or: async with
        ...
        row = claim_row(cur, "account", {"id": user.id}, lease.fence, columns=["balance"])
        lease.ensure_held()                         # before a write that must not be late
        fenced_update(cur, "account", {"id": user.id}, {"balance": row[0] + 10}, lease.fence)

See ``docs/locks.md``.
"""
from ..context import Priority
from .api import LockContext, global_lock, user_write_lock
from .backend import AcquireRequest, Backend, Grant
from .registry import backend_from_url, register_backend
from .config import FAIL_CLOSED, FAIL_OPEN, LockOptions, close_backends, configure, get_backend, options
from .errors import BackendUnavailable, LeaseLost, LockError, LockTimeout, NotHolder
from .fencing import FenceRejected, claim_row, fenced_update
from .fetch import FetchUnderLock, fetch_under_lock
from .lease import Lease, LeaseState, Owner
from .observe import add_metrics_hook, lock_orders, remove_metrics_hook, reset_lock_orders

__all__ = [
    "AcquireRequest", "Backend", "BackendUnavailable", "FAIL_CLOSED", "FAIL_OPEN", "FenceRejected",
    "FetchUnderLock", "Grant", "Lease", "LeaseLost", "LeaseState", "LockContext", "LockError",
    "LockOptions", "LockTimeout", "NotHolder", "Owner", "Priority", "add_metrics_hook",
    "backend_from_url", "claim_row", "close_backends", "configure", "fenced_update",
    "fetch_under_lock", "get_backend", "global_lock", "lock_orders",
    "options", "register_backend", "remove_metrics_hook", "reset_lock_orders", "user_write_lock",
]
