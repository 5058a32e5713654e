"""Provenance: stamp every read, judge every write.

This is the seed's mechanism (Khan's ``_ts_get_nonce`` and
``_transaction_at_request_time``) made isolation- and lease-aware:

* a **read** of an entity whose model has a policy records a stamp: a per-request
  tick (the nonce), the transaction in force, the leases held, whether the row
  was read ``FOR UPDATE``, and the user's read site;
* a **write** compares that stamp with the transaction and leases in force now,
  checks the model's policy, and scans the per-key write history of the request
  for another Python object that wrote the same row after this one was read.

Reads and writes run for every row of every request, so their common case is
written flat and allocates only plain tuples: a stamp is kept as a tuple shaped
like :class:`ReadStamp`, a write as ``(tick, fields, site)``.  A write that cannot
be reported (the usual case: read and written in one transaction that prevents
lost updates) is remembered without building anything else; only a write that
may be wrong goes through the full judgement (:class:`~txnsafety.judgement.Judgement`).

Three modules, one job each: the read stamps (:mod:`txnsafety.stamps`, re-exported
here), the rules a doubtful write is judged by (:mod:`txnsafety.judgement`), and here
the write's entry points and the request's write history.

The public functions never raise into the host application, except
:class:`~txnsafety.report.StompingError` in ``raise`` mode.
"""
from __future__ import annotations

import functools
import logging
import sys
from typing import Any, Callable, Iterable, TypeVar

from .config import settings
from .context import RequestScope, Transaction, current_state
from .judgement import Judgement, Locate, cannot_stomp, single_writer
from .policies import STRICT_DEFAULT, Policy, cached_policy, policy_of
from .report import StompingError, model_name
from .sites import Site, sites_wanted, user_site, wants_site
from .stamps import (CURRENT, DeferredReads, ReadStamp, _deferred, add_deferred_reads, entry_of, forget,
                     read_stamp, record_read, record_stale_lock, remove_deferred_reads, restamp, stamp,
                     stamp_in, stamp_statement)

__all__ = ["CURRENT", "DeferredReads", "Locate", "ReadStamp", "add_deferred_reads", "entry_of", "forget", "guarded",
           "model_name", "read_stamp", "record_read", "record_stale_lock", "record_write", "remove_deferred_reads",
           "restamp", "single_writer", "stamp", "stamp_in", "stamp_statement", "write", "write_policy"]

log = logging.getLogger("txnsafety")

F = TypeVar("F", bound=Callable[..., Any])
_MISSING: Any = object()


def guarded(fn: F) -> F:
    """Log the checker's own failures instead of breaking the request.

    For integrations' event handlers too: only :class:`StompingError` (raise mode)
    gets through to the application.
    """
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except StompingError:
            raise
        except Exception:
            log.exception("txnsafety: internal error in %s (the request goes on)", fn.__name__)
            return None
    return wrapper  # type: ignore[return-value]


# -- writes ---------------------------------------------------------------------------

def record_write(
    entity: Any,
    *,
    model: type | None = None,
    key: Any = None,
    fields: Iterable[str] | None = None,
    created: bool = False,
    transaction: Transaction | None = CURRENT,
    versioned: bool = False,
    history_model: type | None = None,
) -> None:
    """Judge a write of ``entity`` against its read stamp and the model's policy.

    ``fields`` is what the write sends (``None``: the whole row, as Django's
    ``save()``); ``created`` marks an insert of a new entity, which needs no
    read-side protection (as in the seed); ``versioned`` marks a write the data
    layer makes conditional on a version column (it cannot stomp).
    ``history_model`` names the table for TXN103 when it differs from the class
    whose policy applies (a Django proxy model and its concrete model share rows).

    Written flat, like :func:`record_read`: it runs for every write.  A write that
    cannot be reported is only remembered (for TXN103); any other one is judged
    in full by :class:`~txnsafety.judgement.Judgement`.
    """
    if not settings.enabled:
        return
    scope, transactions, _ = current_state()
    if scope is None:
        return
    try:
        cls = model or type(entity)
        policy = write_policy(cls)
        if policy is None:
            return
        if key is None:
            key = getattr(entity, "pk", None) or getattr(entity, "id", None)
        if transaction is CURRENT:
            transaction = transactions[-1] if transactions else None
        if _deferred:
            entry_of(scope, entity)  # a read an integration left on the object counts
        write(scope, entity, model=cls, policy=policy, key=key,
              written=frozenset(fields) if fields is not None else None, transaction=transaction,
              created=created, versioned=versioned, history_model=history_model, depth=2)
    except StompingError:
        raise
    except Exception:
        log.exception("txnsafety: internal error in %s (the request goes on)", "record_write")


def write_policy(cls: type) -> Policy | None:
    """The policy a write of ``cls`` is judged by: its own; ``STRICT_DEFAULT`` in
    strict mode when it has none; None when the write is not checked at all."""
    policy = cached_policy(cls, _MISSING)
    if policy is _MISSING:
        policy = policy_of(cls)
    if policy is None and settings.strict:
        return STRICT_DEFAULT
    return policy


def write(scope: RequestScope, entity: Any, *, model: type, policy: Policy, key: Any,
          written: frozenset[str] | None, transaction: Transaction | None, created: bool = False,
          versioned: bool = False, history_model: type | None = None, depth: int = 1, frame: Any = None,
          locate: Locate | None = None, sent: frozenset[str] | None | Any = _MISSING) -> None:
    """The step :func:`record_write` ends with, for an integration's per-write hook that
    has already found the scope, the class (``model``), its policy (``STRICT_DEFAULT``
    when it has none) and the ``transaction`` (SQLAlchemy's flush, Django's ``save()``).
    Every fact is named at the call (keyword-only): a call with bare ``True``/``None``
    in eleven positions cannot be read, and the keywords cost the hot path nothing
    it measures (``benchmarks/bench_checker.py``).

    ``created`` marks an insert; ``versioned`` a write the data layer makes
    conditional (it cannot stomp); ``history_model`` the table the row's write
    history is kept under when it is not ``model``'s (a proxy and its concrete model).

    The entity's read is looked up in ``scope.stamps`` only: an integration that
    leaves its reads on the objects (:class:`DeferredReads`) takes the read in first.

    ``depth`` counts the frames between the write's caller and this one (1: called
    by the code that writes); the full judgement looks for sites from there.  It
    raises what :func:`record_write` would (in ``raise`` mode a violation ends
    here, unremembered); the caller guards it.

    ``written`` is what the write sends *from the read*: an integration leaves out
    the columns the database computes or that are written blind (see
    :mod:`txnsafety.values`), and passes ``versioned=True`` when none is left.
    ``sent`` names every column the write sends, for the report (default:
    ``written``).  ``frame`` is where to look for the sites instead of ``depth``;
    ``locate(frame, entity)`` finds ``(write site, framework-internal)`` itself
    when a violation is reported: a framework's own write is not reported.
    """
    cls = model
    history_key = (history_model or cls, key)  # the row: its table's class and its key
    try:
        history = scope.writes.get(history_key)
    except TypeError:  # an unhashable key: by its text
        history_key = (history_key[0], repr(key))
        history = scope.writes.get(history_key)
    me = id(entity)
    if cannot_stomp(policy, scope.stamps.get(me), transaction, created, versioned, written, history, me):
        site = user_site(depth) if (sites_wanted or settings.read_sites == "always") and wants_site(cls) else None
    else:
        site = Judgement(entity, scope, cls, key, policy, stamp_in(scope, entity), transaction, created,
                         history, frame if frame is not None else sys._getframe(depth), locate,
                         written if sent is _MISSING else sent).judge(written, versioned)
    _remember_write(scope, history_key, history, me, entity, written, site)


def _remember_write(scope: RequestScope, history_key: tuple[Any, Any], history: dict[int, tuple[Any, ...]] | None,
                    me: int, entity: Any, written: frozenset[str] | None, site: Site | None) -> None:
    """Keep the latest write of each object of a row, ``(tick, field ticks, site, entity)``, in
    write order, so a later write scans only the writes made after its own read (see
    judgement.erased_write).

    ``field ticks`` says when each field was last written by this object (key None: the
    whole row), so a field written before another object's read does not count as erased
    by that object because a later write of this one changed another field.  ``site`` is
    what a later TXN103 names as "the other write"; the entity is held so that its id,
    the key, names no other object while the request lasts.  ``history`` is the row's
    writes so far (None: none yet, kept under ``history_key`` from now on).
    """
    now = scope.last = next(scope._clock)
    if history is None:
        history = scope.writes[history_key] = {}
        ticks: dict[str | None, int] = {}
    else:
        previous = history.pop(me, None)  # re-inserted last: the dict stays in write order
        ticks = {} if previous is None else previous[1]  # this object's own: updated in place
    if written is None:
        ticks[None] = now
    else:
        for name in written:
            ticks[name] = now
    history[me] = (now, ticks, site, entity)
