"""``Session.merge()``: the merged object holds the copy's values, so it takes the copy's read.

SQLAlchemy tells no listener which object a merge copies from, so ``Session._merge``
(private; pinned by ``tests/sqlalchemy/test_private_api.py``) is wrapped: ``merge()``,
``merge_all()``, their cascades and ``merge_frozen_result`` (the dogpile.cache recipe)
call it once per object.  A copy read in an earlier request (cached, pickled or not)
and written now through the merged object is the stale copy it is (TXN101 / TXN102,
reported at the copy's read); one read in another transaction of this request is
TXN104.  A copy that was never read under a checker scope (a new object, built by
hand) carries nothing.
"""
from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from .. import checker
from ..config import settings
from ..context import current_scope
from . import events, reads

_original_merge = Session._merge


def _merge(self: Session, state: Any, state_dict: Any, **kwargs: Any) -> Any:
    merged = _original_merge(self, state, state_dict, **kwargs)
    if settings.enabled and current_scope() is not None and events.is_instrumented(self):
        try:
            carry_read(state, merged)
        except Exception:  # the checker must never break the application's merge
            checker.log.exception("txnsafety: internal error in Session.merge (the request goes on)")
    return merged


def carry_read(copy_state: Any, merged: Any) -> None:
    """Give ``merged`` the read of the object whose state is ``copy_state``."""
    read = reads.read_of(copy_state)
    if read is None or merged is None:
        return
    merged_state = getattr(merged, reads.STATE_ATTR, None)
    if merged_state is None or merged_state is copy_state:
        return
    checker.forget(merged)  # whatever it held before, it now holds the copy's values
    reads.leave_read(merged_state, read)


def _install() -> None:
    Session._merge = _merge  # type: ignore[method-assign]


def _uninstall() -> None:
    Session._merge = _original_merge  # type: ignore[method-assign]


if (_install, _uninstall) not in events._PATCHES:
    events._PATCHES.append((_install, _uninstall))
    if events._installed:
        _install()
