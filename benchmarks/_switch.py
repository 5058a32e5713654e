"""Switch a monkeypatching library in and out of one process, for side-by-side rounds.

The peers a benchmark compares against (django-zeal, nplusone, sentry-sdk) install
themselves by replacing functions on Django's classes and modules, once, and offer no
way back.  To time each of them against the bare framework in the same process, round
after round, :func:`capture` records what a library's setup replaced — every function,
method or descriptor that changed on any loaded module or on a class defined in one —
and returns a :class:`PatchSet` that puts the library's versions in place (``apply``) or
the originals back (``revert``).  Each library is captured from the pristine state, so
its wrappers wrap the framework's own functions, never another library's.

What this cannot see: state a setup mutates in place (a list it appends to, a signal it
connects), and attributes of modules first imported during the setup (import them before
capturing).  :func:`capture` returns those new modules' names so a caller can check.
"""
from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from typing import Any, Callable

_MISSING: Any = object()
#: Attributes that change for reasons of their own (warnings' registry, docstrings).
_IGNORED = frozenset({"__warningregistry__", "__dict__", "__weakref__", "__doc__", "__annotations__"})


@dataclass
class Change:
    """One attribute a setup replaced: its owner (module or class), name, old and new value."""

    owner: Any
    name: str
    before: Any
    after: Any

    def __str__(self) -> str:
        owner = getattr(self.owner, "__qualname__", None) or getattr(self.owner, "__name__", repr(self.owner))
        module = getattr(self.owner, "__module__", "")
        return f"{module + '.' if isinstance(self.owner, type) and module else ''}{owner}.{self.name}"


@dataclass
class PatchSet:
    """What one library's setup replaced; ``apply`` puts it in place, ``revert`` takes it out."""

    changes: list[Change]
    new_modules: list[str] = field(default_factory=list)

    def apply(self) -> None:
        for change in self.changes:
            _set(change.owner, change.name, change.after)

    def revert(self) -> None:
        for change in reversed(self.changes):
            _set(change.owner, change.name, change.before)


def _set(owner: Any, name: str, value: Any) -> None:
    if value is _MISSING:
        if name in vars(owner):
            delattr(owner, name)
    else:
        setattr(owner, name, value)


def _patchable(value: Any) -> bool:
    """Functions, methods, descriptors and classes: what a patch replaces (not data, not submodules)."""
    if value is _MISSING:
        return True
    # ``type(value)``, not ``isinstance``: a lazy object (Django's ``staticfiles_storage``)
    # would set itself up when asked for its ``__class__``
    kind = type(value)
    if issubclass(kind, types.ModuleType):
        return False
    return callable(value) or issubclass(kind, (staticmethod, classmethod, property))


def _owners() -> dict[int, tuple[Any, dict[str, Any]]]:
    """Every loaded module and every class defined in one, with a copy of its namespace."""
    found: dict[int, tuple[Any, dict[str, Any]]] = {}
    for name, module in list(sys.modules.items()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        found[id(module)] = (module, dict(namespace))
        for value in list(namespace.values()):
            if issubclass(type(value), type) and getattr(value, "__module__", None) == name \
                    and id(value) not in found:
                found[id(value)] = (value, dict(vars(value)))
    return found


def capture(setup: Callable[[], Any]) -> PatchSet:
    """Run ``setup`` (a library's install), record what it replaced, and take it out again."""
    modules_before = set(sys.modules)
    before = _owners()
    setup()
    changes: list[Change] = []
    for owner, old in before.values():
        new = getattr(owner, "__dict__", {})
        for name in old.keys() | new.keys():
            if name in _IGNORED:
                continue
            was, now = old.get(name, _MISSING), new.get(name, _MISSING)
            if was is not now and _patchable(was) and _patchable(now):
                changes.append(Change(owner, name, was, now))
    patches = PatchSet(changes, sorted(set(sys.modules) - modules_before))
    patches.revert()
    return patches
