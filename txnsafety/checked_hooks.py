"""Hooks in place only while a checked scope is open somewhere in the process.

Some hooks an integration installs do nothing unless the statement or flush they see
runs in a checked scope: SQLAlchemy's ``loading.instances`` (every ORM statement) and
its ``before_update`` / ``after_insert`` mapper listeners (every flushed object) each
return at once without one.  Installed for good, each still costs a Python call every
time in a request the sample leaves out, with the checker installed but off, and
outside any request: most of what such a request paid (docs/performance.md, fourteenth
round).  So they are put in place only while a checked scope is open:

* :func:`scope_opened` (every checked scope: :func:`txnsafety.context.open_scope`) puts
  every registered hook in place, in the same locked section that counts the scope
  open, before the scope runs anything: a statement or flush of a checked scope always
  finds its hook;
* a hook that finds no checked scope in its context, and none open in the process
  (:data:`OPEN`, read as a hint), calls :func:`idle`, which takes them all out again
  if, under the lock, no scope is open.  So a run of checked requests switches nothing,
  and the requests after the last one pay for the hooks once.

Two kinds of hook: a module attribute (:class:`AttributeSwap`: ``loading.instances``,
looked up on the module at every call), never a class's (assigning a class attribute
changes the type's version, which drops every attribute cache CPython keeps for it);
and a listener registered once whose target is switched (:class:`Switch`: a
``functools.partial`` whose function is set through its own ``__setstate__``, so the
library's listener list is never touched; off, its function is ``slice``, a C
callable that accepts the listener's three arguments and keeps nothing: no Python
frame).  A swap never replaces what it did not put there (a test's spy, another
library's wrapper of ``loading.instances``).
"""
from __future__ import annotations

import functools
import logging
import threading
from typing import Any, Protocol

log = logging.getLogger("txnsafety")

__all__ = ["Swap", "AttributeSwap", "Switch", "register", "unregister", "scope_opened", "scope_closed", "idle",
           "open_scopes", "hooks_on", "OPEN"]


class Swap(Protocol):
    """A hook that can be put in place and taken out (under this module's lock only)."""

    def on(self) -> None:
        """Put the hook in place."""

    def off(self) -> None:
        """Take the hook out."""


class AttributeSwap:
    """``owner.name`` is ``checked`` while a checked scope is open, ``plain`` otherwise; an attribute
    someone else has set since is left alone (logged once when it keeps the hook out)."""

    __slots__ = ("owner", "name", "checked", "plain", "warned")

    def __init__(self, owner: Any, name: str, checked: Any, plain: Any) -> None:
        self.owner, self.name, self.checked, self.plain = owner, name, checked, plain
        self.warned = False

    def on(self) -> None:
        current = getattr(self.owner, self.name, None)
        if current is self.plain:
            setattr(self.owner, self.name, self.checked)
        elif current is not self.checked and not self.warned:
            self.warned = True
            log.warning("txnsafety: %s.%s was replaced by %r, which txnsafety leaves in place: what passes "
                        "there is checked only if it calls txnsafety's hook", getattr(self.owner, "__name__", "?"),
                        self.name, current)

    def off(self) -> None:
        if getattr(self.owner, self.name, None) is self.checked:
            setattr(self.owner, self.name, self.plain)


#: A C callable that takes the three arguments of a mapper listener and keeps nothing: what a
#: switched-off :class:`Switch` calls (a slice object made and dropped; no Python frame).
_NOTHING = slice


class Switch:
    """A listener to register once (``switch.listener``) that calls ``function`` while a checked
    scope is open and nothing of Python otherwise.

    ``function`` must take exactly three positional arguments (what ``slice`` accepts) and return
    nothing the caller uses: SQLAlchemy's ``raw=True, retval=True`` mapper listeners.
    """

    __slots__ = ("function", "listener")

    def __init__(self, function: Any) -> None:
        self.function = function
        self.listener = functools.partial(_NOTHING)

    def on(self) -> None:
        self.listener.__setstate__((self.function, (), None, None))

    def off(self) -> None:
        self.listener.__setstate__((_NOTHING, (), None, None))


_lock = threading.Lock()
_swaps: list[Swap] = []
#: A checked scope's key (its token: the scope itself is not kept alive here) -> how many times it is
#: open now (one scope may be opened again before it is closed).  Read without the lock only as a
#: hint (a hook asking whether :func:`idle` may have work).  A scope never closed (a streamed body
#: its server abandoned unclosed) keeps the hooks in for the process: slower, never less checked.
OPEN: dict[Any, int] = {}
#: [whether the registered hooks are in place]
_on = [False]


def open_scopes() -> int:
    """How many checked scopes are open in the process (tests and benchmarks)."""
    return sum(OPEN.values())


def hooks_on() -> bool:
    """Whether the registered hooks are in place now (tests and benchmarks)."""
    return _on[0]


def register(swap: Swap) -> None:
    """Swap ``swap`` from now on (in place at once while the hooks are)."""
    with _lock:
        _swaps.append(swap)
        if _on[0]:
            swap.on()


def unregister(swap: Swap) -> None:
    """Stop swapping ``swap``; it is left out."""
    with _lock:
        if swap in _swaps:
            _swaps.remove(swap)
        swap.off()


def scope_opened(key: Any) -> None:
    """A checked scope opened (``key``: its token): every hook is in place before it runs anything."""
    with _lock:
        OPEN[key] = OPEN.get(key, 0) + 1
        if not _on[0]:
            for swap in _swaps:
                swap.on()
            _on[0] = True


def scope_closed(key: Any) -> None:
    """A checked scope closed (closing one again, or one never opened, changes nothing).  The
    hooks stay until one finds nothing to do (:func:`idle`): the next request may be checked."""
    with _lock:
        opened = OPEN.pop(key, 0)
        if opened > 1:
            OPEN[key] = opened - 1


def idle() -> None:
    """A hook found no checked scope in its context, and none open: take the hooks out, if under
    the lock still none is open."""
    with _lock:
        if _on[0] and not OPEN:
            for swap in _swaps:
                swap.off()
            _on[0] = False
