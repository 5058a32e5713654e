"""TXN105 at run time: an empty lookup, then an insert keyed on the same values.

The checker sees both halves of a check-then-act.  An integration tells it

* :func:`note_lookup` — a lookup on a model keyed on exact column values found
  nothing (``exists()`` false, ``DoesNotExist``, ``first()`` / ``scalar_one_or_none()``
  returning nothing, a ``count()`` of 0), or counted rows and compared the count with a
  limit (``count() < capacity``, told by :mod:`txnsafety.limits`);
* :func:`note_insert` — a row of that model is inserted, with its column values
  and the model's unique keys (primary key, ``unique=True``, ``unique_together``,
  ``UniqueConstraint``, a table's unique constraints and indexes).

An insert whose values match an earlier lookup's keys is TXN105 unless something
makes the pair atomic: a unique key within the lookup's keys (the database rejects
the second insert), a lock lease held at the check and still held, a serializable
transaction around both, or a row lock (FOR UPDATE) taken in the same transaction
before the check (it serializes the requests that take it).  ``get_or_create()``
and its kin are told apart by the integration (:func:`atomic_block`): their lookup is
no check, and their insert acts on their own lookup, not on an earlier check.  A check
pairs with an insert made while the check's function, or the user function that called
it, still runs (:func:`_extent`).

A count under a limit is settled by the lock or the serializable transaction only:
a unique key can bound a count at one row, never at a capacity, so the report of a
count does not offer one (a unique key within the count's keys still rejects the insert
itself, so that pair is not reported).

Key values are kept in the request's memory only to compare them; reports name the
key columns, never their values.
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Iterable, Iterator, Mapping

from .codes import Code
from .context import RequestScope, Transaction, held_leases
from .report import Violation, report
from .sites import Site, frames_here, is_library_file, outward, sites_wanted, user_frame

#: Empty lookups kept per model and request (a loop of lookups keeps the latest ones).
MAX_LOOKUPS = 64

#: True inside ``get_or_create()`` and the like: their own lookup and insert are atomic
#: by design (with a unique key) or documented as racy without one; not ours to report.
_atomic: ContextVar[bool] = ContextVar("txnsafety_check_then_act_atomic", default=False)


@contextmanager
def atomic_block() -> Iterator[None]:
    """Lookups made inside are not checks of a check-then-act (``get_or_create()``)."""
    token = _atomic.set(True)
    try:
        yield
    finally:
        _atomic.reset(token)


def _value(value: Any) -> Any:
    """A comparable stand-in for a key value (a model instance by its primary key)."""
    pk = getattr(value, "pk", None)
    if pk is not None and hasattr(value, "_meta"):
        value = pk
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


def note_lookup(scope: RequestScope, model: type, keys: Mapping[str, Any], kind: str,
                transaction: Transaction | None, depth: int = 1, limit: bool = False) -> None:
    """Remember that a lookup of ``model`` keyed on ``keys`` (column -> value) was a check.

    ``kind`` says what it was (``"exists() false"``, ``"DoesNotExist"``...), for the report;
    ``limit`` that it was a count compared with a limit rather than a lookup that found
    nothing; the check site is the first user frame from the caller's (``depth`` 1) outward.
    """
    if not keys or _atomic.get():
        return
    items = frozenset((name, _value(value)) for name, value in keys.items())
    locked = (transaction is not None and scope.locked_roots is not None
              and transaction.root_id in scope.locked_roots)
    frame = user_frame(depth)
    site = None if frame is None else Site(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
    entry = (items, transaction, held_leases(), locked, kind, site, limit, _extent(frame))
    lookups = scope.lookups
    if lookups is None:
        lookups = scope.lookups = {}
    pending = lookups.setdefault(model, [])
    pending.append(entry)
    if len(pending) > MAX_LOOKUPS:
        del pending[0]


def note_row_lock(scope: RequestScope, transaction: Transaction | None) -> None:
    """A row was locked (FOR UPDATE) in ``transaction``: checks made after it are serialized."""
    if transaction is None:
        return
    if scope.locked_roots is None:
        scope.locked_roots = set()
    scope.locked_roots.add(transaction.root_id)


def note_insert(scope: RequestScope, model: type, values: Mapping[str, Any], unique: Iterable[frozenset[str]],
                transaction: Transaction | None, key: Any, model_label: str,
                locate: Callable[[], tuple[Site | None, bool]]) -> None:
    """An insert of ``model`` with ``values`` (column -> value): report TXN105 for each
    earlier lookup it acts on with nothing making the pair atomic.

    ``locate()`` gives ``(insert site, framework-internal)`` and is called only to report.
    """
    lookups = scope.lookups
    pending = lookups.get(model) if lookups else None
    if not pending or _atomic.get():
        return  # (an insert by get_or_create() follows its own lookup, not an earlier check)
    unique_keys = None
    for entry in list(pending):
        items, check_txn, leases, locked, kind, check_site, limit, extent = entry
        if not all(name in values and _value(values[name]) == value for name, value in items):
            continue
        pending.remove(entry)  # acted on: one report per check
        names = frozenset(name for name, _ in items)
        if unique_keys is None:
            unique_keys = [frozenset(u) for u in unique]
        if any(u and u <= names for u in unique_keys):
            continue  # the database rejects the second insert
        if _atomic_pair(check_txn, transaction, leases, locked):
            continue
        if extent and not _running(extent):
            continue  # the code that made the check has returned: this insert is not what it guarded
        site, internal = locate()
        if internal:
            continue
        sites_wanted.add(model)
        report(Violation(
            Code.TXN105, _LIMIT_MESSAGE.format(kind=kind) if limit else _MESSAGE.format(kind=kind),
            model_label, None if key is None else str(key),
            read_site=check_site, write_site=site,
            detail={"keys": ", ".join(sorted(names)), "check": kind}, request_id=scope.id))


_MESSAGE = (
    "check-then-act: a lookup found no row ({kind}), then this insert keyed on the same values, with nothing "
    "making the pair atomic: two requests can both pass the check and both insert. Add a unique constraint on "
    "the keys (and handle IntegrityError), use get_or_create() with one, or hold a lock across both")
_LIMIT_MESSAGE = (
    "check-then-act: rows were counted and the count compared with a limit ({kind}), then this insert keyed on "
    "the same values, with nothing making the pair atomic: two requests can both count under the limit and both "
    "insert, one over it. Lock the parent row (select_for_update() / with_for_update()) in the same "
    "transaction before counting, or count and insert in a serializable transaction (a unique constraint "
    "cannot bound a count)")


def _extent(frame: Any) -> frozenset[tuple[int, Any]]:
    """Marks of the check's function and of the user function that called it: the check
    guards what runs before the latter returns (``if not exists(): create()``, or a helper's
    check acted on by its caller).  A check made in one call and an insert made later by
    unrelated code (a validation's ``exists()``, then a factory's ``create()``) is no pair.
    Ids with code objects: frames are not kept alive; an id reused by the same function's
    next call counts as the same (a loop of check and insert)."""
    if frame is None:
        return frozenset()
    marks = {(id(frame), frame.f_code)}
    callers = outward(frame)
    next(callers)
    for outer in callers:  # (a helper coroutine's caller: from the chain its hop kept)
        if not is_library_file(outer.f_code.co_filename, outer.f_globals):
            marks.add((id(outer), outer.f_code))
            break
    return frozenset(marks)


def _running(extent: frozenset[tuple[int, Any]]) -> bool:
    """Whether a frame marked in ``extent`` is on the stack of the insert (across greenlet and
    ``sync_to_async`` hops: the awaiting coroutine counts)."""
    for frame in frames_here(2):
        if (id(frame), frame.f_code) in extent:
            return True
    return False


def _atomic_pair(check_txn: Transaction | None, txn: Transaction | None, leases: tuple[Any, ...],
                 locked: bool) -> bool:
    """Whether something held from the check to the insert keeps another request out."""
    held = held_leases()
    if any(any(h is lease for h in held) and lease.is_live() and getattr(lease, "verified", True)
           for lease in leases):
        return True
    if check_txn is None or txn is None or check_txn.root_id != txn.root_id:
        return False
    return locked or "serializable" in check_txn.isolation.lower()
