"""How each model keeps its writes safe: Khan's nine policies plus ``versioned``.

A policy is declared once per model class with a decorator::

    @written_with_user_lock(lambda user: user.id)
    class UserPoints(models.Model): ...

The checker looks the policy up at write time (:func:`policy_of`); a model with
no policy is not checked unless ``strict`` is on.  Declaring a second policy on
the same class is an error: two declarations mean nobody knows which one holds.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

T = TypeVar("T", bound=type)

_ATTR = "__txnsafety_policy__"


class Protection(enum.Enum):
    """What a write of a read entity must be protected by."""

    NOTHING = "nothing"            # the checker checks no protection (legacy, versioned)
    TRANSACTION = "transaction"
    USER_LOCK = "user_lock"
    TRANSACTION_OR_LOCK = "transaction_or_lock"
    FORBIDDEN = "forbidden"        # any write is a policy violation


@dataclass(frozen=True)
class Policy:
    """A model's declared write discipline.

    ``protection`` says what the read-modify-write needs; ``internal`` says
    whether two objects for one key written in one request (TXN103) are checked.
    """

    name: str
    protection: Protection
    lock_id_fn: Callable[[Any], Any] | None = None
    reason: str = ""
    inherit: bool = True
    single_writer: str | None = None
    versioned_field: str | None = None
    internal: bool = True
    forbid_rewrite: bool = False
    #: True when a write of a read entity is cleared by its read's transaction alone, or needs no
    #: protection: no user lock, single writer, ban on re-writes or on writes to ask about.
    #: Computed once per policy, for the integrations' per-write quick paths (one test, not four).
    quick: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "quick", self.single_writer is None and not self.forbid_rewrite
                           and self.protection in _QUICK_PROTECTIONS)

    def lock_id(self, entity: Any) -> str:
        """The user write lock that protects ``entity`` (``str`` of the lock-id function)."""
        if self.lock_id_fn is None:
            raise TypeError(f"txnsafety: policy {self.name!r} has no lock-id function")
        return str(self.lock_id_fn(entity))


#: What a write's quick path judges by the read's transaction alone (NOTHING: needs no protection).
_QUICK_PROTECTIONS = frozenset({Protection.TRANSACTION, Protection.TRANSACTION_OR_LOCK, Protection.NOTHING})


def _declare(policy: Policy) -> Callable[[T], T]:
    def decorate(cls: T) -> T:
        if not isinstance(cls, type):
            raise TypeError(f"txnsafety: @{policy.name} decorates a model class, not {cls!r}")
        existing = cls.__dict__.get(_ATTR)
        if existing is not None:
            raise TypeError(
                f"txnsafety: {cls.__qualname__} already declares @{existing.name}; "
                f"a model has exactly one write policy (tried to add @{policy.name})")
        setattr(cls, _ATTR, policy)
        _cache.clear()
        return cls
    return decorate


def _reason(reason: str, name: str) -> str:
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError(f"txnsafety: @{name} needs a reason= saying why the model may stomp")
    return reason


def never_written() -> Callable[[T], T]:
    """The model is read-only for this application (e.g. another service owns it)."""
    return _declare(Policy("never_written", Protection.FORBIDDEN))


def abstract() -> Callable[[T], T]:
    """A base class that is never stored itself; subclasses declare their own policy."""
    return _declare(Policy("abstract", Protection.FORBIDDEN, inherit=False))


def embedded() -> Callable[[T], T]:
    """Stored only inside a parent entity (a structured property); never written alone."""
    return _declare(Policy("embedded", Protection.FORBIDDEN))


structured_property = embedded


def written_once() -> Callable[[T], T]:
    """Created once and never updated: creation needs no protection, a re-write is TXN110."""
    return _declare(Policy("written_once", Protection.NOTHING, forbid_rewrite=True))


def written_in_transaction() -> Callable[[T], T]:
    """Every read-modify-write happens inside one transaction that prevents lost updates."""
    return _declare(Policy("written_in_transaction", Protection.TRANSACTION))


def written_with_user_lock(lock_id: Callable[[Any], Any]) -> Callable[[T], T]:
    """Every read-modify-write happens under the user write lock ``lock_id(entity)``."""
    if not callable(lock_id):
        raise TypeError("txnsafety: @written_with_user_lock takes the lock-id function, e.g. lambda e: e.user_id")
    return _declare(Policy("written_with_user_lock", Protection.USER_LOCK, lock_id_fn=lock_id))


def written_in_transaction_or_user_lock(lock_id: Callable[[Any], Any]) -> Callable[[T], T]:
    """Either protection is enough (code paths migrating from one to the other)."""
    return _declare(Policy("written_in_transaction_or_user_lock", Protection.TRANSACTION_OR_LOCK,
                           lock_id_fn=lock_id))


def written_by_single_writer(name: str = "cron") -> Callable[[T], T]:
    """Only one writer (a cron job, a queue consumer) ever writes it.

    Writes must happen inside :func:`txnsafety.single_writer(name)`; anywhere else
    is TXN110.  No lock is needed because nothing runs concurrently with it.
    """
    return _declare(Policy("written_by_single_writer", Protection.NOTHING, single_writer=name))


written_via_cron = written_by_single_writer


def dangerously_written_outside_transaction(reason: str) -> Callable[[T], T]:
    """Legacy: writes are known to be unprotected.  Internal stomping is still checked."""
    return _declare(Policy("dangerously_written_outside_transaction", Protection.NOTHING,
                           reason=_reason(reason, "dangerously_written_outside_transaction")))


def dangerously_written_outside_transaction_or_user_lock(reason: str) -> Callable[[T], T]:
    """Legacy: neither a transaction nor a lock protects writes.  Internal stomping is still checked."""
    return _declare(Policy("dangerously_written_outside_transaction_or_user_lock", Protection.NOTHING,
                           reason=_reason(reason, "dangerously_written_outside_transaction_or_user_lock")))


def versioned(field: str = "version") -> Callable[[T], T]:
    """Optimistic: every write is conditional on a version column (SQLAlchemy
    ``version_id_col``, django-concurrency, Duolingo's check-and-set).  A
    conflicting write fails instead of stomping, so no read-modify-write check applies.
    """
    return _declare(Policy("versioned", Protection.NOTHING, versioned_field=field, internal=False))


STRICT_DEFAULT = Policy("strict_default", Protection.TRANSACTION_OR_LOCK)

_cache: dict[type, Policy | None] = {}

#: ``cached_policy(model, default)``: the policy :func:`policy_of` found for ``model``
#: (None: none), or ``default`` when it has not been asked yet.  The cache's own ``get``,
#: bound once: no Python frame, for the per-write and per-statement look-ups.
cached_policy: Callable[..., Any] = _cache.get


def policy_of(model: type) -> Policy | None:
    """The policy that governs ``model``: its own, or the nearest inherited one.

    ``abstract`` is not inherited: a concrete subclass of an abstract base must
    say how it is written.  Cached per class; declare policies at import time.
    """
    try:
        return _cache[model]
    except (KeyError, TypeError):
        pass
    found: Policy | None = None
    for klass in getattr(model, "__mro__", (model,)):
        candidate = klass.__dict__.get(_ATTR) if hasattr(klass, "__dict__") else None
        if candidate is None:
            continue
        if klass is model or candidate.inherit:
            found = candidate
        break
    try:
        _cache[model] = found
    except TypeError:
        pass
    return found


def register_policy(model: type, policy: Policy) -> None:
    """Attach a policy to a class you cannot decorate (a third-party model)."""
    _declare(policy)(model)
