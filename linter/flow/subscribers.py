"""The rules as the walk sees them: handlers per kind of event, handed in from the top.

The walk never imports a rule.  The entry points (``txnsafety_lint.analysis``) hand the
module driver a :class:`Subscribers` built by ``rules/subscriptions.py``; every event the
walk emits (``FunctionState.emit``) and every call joined after the walks
(``CallResolved``) goes through :meth:`Subscribers.dispatch` to the handlers of its kind, in
the order they were given (the order of the reports on one line).  A walk handed
:data:`NO_RULES` records its events and reports nothing, which is how a test looks at the
facts alone.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

from .events import Event, EventKind

#: a rule's handler: the function's state (``flow.state.FunctionState``) and the event
Handler = Callable[[Any, Event], None]


@dataclasses.dataclass(frozen=True)
class Subscribers:
    """Which handlers hear which kind of event, in the order they decide."""

    handlers: Mapping[EventKind, tuple[Handler, ...]]

    def dispatch(self, state: Any, event: Event) -> None:
        for handler in self.handlers.get(event.kind, ()):
            handler(state, event)


NO_RULES = Subscribers({})
