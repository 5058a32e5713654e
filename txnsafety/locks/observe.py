"""Contention logs, metrics hooks and lock-order tracking.

Khan's experience: logging who waited on whom made contention far easier to
diagnose than transaction retries ever were.  Everything here is cheap on the
uncontended path (one ``isEnabledFor`` check, one loop over hooks).
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable

log = logging.getLogger("txnsafety.locks")

MetricsHook = Callable[..., None]
_hooks: list[MetricsHook] = []
_order_lock = threading.Lock()
_orders: dict[tuple[str, str], int] = {}


def add_metrics_hook(fn: MetricsHook) -> None:
    """Call ``fn(event, **fields)`` on lock events.

    Events: ``acquired`` (key, backend, priority, waited, contended, fence),
    ``timeout`` (key, backend, priority, waited, holder), ``released`` (key,
    held_for, ok), ``lost`` (key, why), ``backend_error`` (key, backend, policy),
    ``release_in_doubt`` (key, backend),
    ``lock_order`` (first, second).  A hook that raises is logged and ignored.
    """
    _hooks.append(fn)


def remove_metrics_hook(fn: MetricsHook) -> None:
    if fn in _hooks:
        _hooks.remove(fn)


def emit(event: str, **fields: Any) -> None:
    for fn in list(_hooks):
        try:
            fn(event, **fields)
        except Exception:
            log.exception("txnsafety: lock metrics hook failed")


def record_order(held: list[str], new: str) -> None:
    """Log that ``new`` is taken while ``held`` are held; warn on an inverted pair.

    Two requests that take A then B and B then A can deadlock (until a lease
    ends).  Seeing both orders in one process is the signal worth a WARNING.
    """
    for first in held:
        if first == new:
            continue
        pair = (first, new)
        with _order_lock:
            seen = _orders.get(pair, 0)
            _orders[pair] = seen + 1
            inverted = _orders.get((new, first), 0)
        if seen == 0:
            log.info("txnsafety: lock order %r -> %r", first, new,
                     extra={"txnsafety_lock": {"event": "order", "first": first, "second": new}})
            emit("lock_order", first=first, second=new)
            if inverted:
                log.warning("txnsafety: deadlock-prone lock order: %r -> %r and %r -> %r both seen",
                            first, new, new, first,
                            extra={"txnsafety_lock": {"event": "order_inversion", "first": first,
                                                      "second": new}})


def lock_orders() -> dict[tuple[str, str], int]:
    """Pairs (first, second) of lock keys taken nested in this process, with counts."""
    with _order_lock:
        return dict(_orders)


def reset_lock_orders() -> None:
    with _order_lock:
        _orders.clear()
