"""SQLAlchemy objects that leave their Session: closed or expunged, pickled and unpickled.

A read is noted per statement in the Session's state (:mod:`.reads`), found through the
object's ``runid``.  An object kept after its Session let it go (a cache, a module
global, a pickle in Redis: Khan's cached entity) still has to say when, and under what,
it was read, so that a write of it in a later request is judged against that read
(TXN101 / TXN102): the Session's notes are left on the object's InstanceState as it
goes (its read is looked up there by ``runid``), and the read is carried through
pickling by the public ``InstanceEvents.pickle`` / ``unpickle``.
"""
from __future__ import annotations

from collections import deque
from operator import attrgetter, methodcaller
from typing import Any

from sqlalchemy.orm.state import InstanceState

from .reads import INFO_KEY, KEPT_ATTR, READ_ATTR, leave_read, log, read_of


def _detach_states(cls: Any, states: Any, session: Any, to_transient: bool = False) -> Any:
    """``InstanceState._detach_states``: leave the Session's notes on each object before it goes."""
    session_state = session.info.get(INFO_KEY) if session is not None else None
    if session_state is not None and session_state.reads:
        states = states if isinstance(states, list) else list(states)
        try:
            _keep_reads(states, session_state.reads)
        except Exception:
            log.exception("txnsafety: internal error while keeping the reads of detached objects")
    return _detach(cls, states, session, to_transient)


_original_detach = InstanceState.__dict__["_detach_states"]
#: The classmethod's function, taken out once: every Session close passes here.
_detach = _original_detach.__func__


def _keep_reads(states: list[Any], reads: dict[int, tuple[Any, ...]]) -> None:
    """Runs for every object a Session lets go of (``close()``): each state's own ``__dict__``
    (InstanceState keeps one for its memoized properties) gets the Session's notes, which
    :func:`.reads.read_of` looks the state's ``runid`` up in once no Session answers for it.

    One shared dict, one store per row (by C loops), nothing looked up: the copy of each row's own read
    (and its ``runid``) this replaced was the checker's whole per-row cost on a 200-row list
    (about 3,000 instructions a row, cachegrind; docs/performance.md, fifth round).  A read
    left on the state for its values (merge, forget: ``READ_ATTR``) still comes first.
    """
    _consume(map(methodcaller("__setitem__", KEPT_ATTR, reads), map(_dict_of, states)))


#: ``_consume(iterator)`` runs it to the end keeping nothing; with :func:`_keep_reads`' maps, the
#: store per state is made by C loops (a Python loop was four bytecodes a row).
_consume = deque(maxlen=0).extend
_dict_of = attrgetter("__dict__")


def on_pickle(state: Any, state_dict: dict[str, Any]) -> None:
    """``InstanceEvents.pickle``: carry the read's mark into a pickled object.

    A cache that pickles entities (dogpile.cache, Redis) is where Khan's cached
    entity lives; ``InstanceState.__getstate__`` keeps ``info`` but not our own
    attribute.  The leases are dropped: a lease is not the later request's, and
    need not pickle; the site (plain strings and a number) is kept for the report.
    """
    read = read_of(state)
    if read is not None:
        state_dict[READ_ATTR] = _pickled_read(read[4])


def _pickled_read(site: Any) -> tuple[Any, ...]:
    """What a read becomes in a pickle: no request, tick, transaction or lease; its site."""
    return _PICKLED_READ if site is None else (None, 0, None, (), site, False)


_PICKLED_READ: tuple[Any, ...] = (None, 0, None, (), None, False)


def on_unpickle(state: Any, state_dict: dict[str, Any]) -> None:
    """``InstanceEvents.unpickle``: restore the mark :func:`on_pickle` carried."""
    read = state_dict.get(READ_ATTR)
    if type(read) is tuple and len(read) == 2:  # pickled by txnsafety 0.x before deferred reads: (leases, site)
        read = _pickled_read(read[1])
    if type(read) is tuple and len(read) == 6:
        leave_read(state, read)


def install() -> None:
    InstanceState._detach_states = classmethod(_detach_states)  # type: ignore[assignment]


def uninstall() -> None:
    InstanceState._detach_states = _original_detach  # type: ignore[assignment]
