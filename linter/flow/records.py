"""The records the per-function walk keeps: source positions, call sites, returned rows."""
from __future__ import annotations

import bisect
from typing import Optional

import libcst as cst

from ..facts.module_facts import GetInfo


class _Positions:
    """Line/column of a node from libcst's byte spans (cheaper than PositionProvider)."""

    __slots__ = ("spans", "starts")

    def __init__(self, spans, source: str):
        self.spans = spans
        data = source.encode("utf-8")
        starts = [0]
        find = data.find
        i = find(b"\n")
        while i != -1:
            starts.append(i + 1)
            i = find(b"\n", i + 1)
        self.starts = starts

    def line(self, node: cst.CSTNode) -> int:
        return bisect.bisect_right(self.starts, self.spans[node].start)

    def col(self, node: cst.CSTNode) -> int:
        start = self.spans[node].start
        return start - self.starts[bisect.bisect_right(self.starts, start) - 1]


class CallSite:
    __slots__ = ("callee", "line", "col", "stack", "args", "live", "caller", "receiver",
                 "module_alias", "checks", "guarded", "names", "on_self")

    def __init__(self, callee, line, col, stack, args, live, caller, receiver, module_alias=None):
        self.module_alias = module_alias   # ``services`` in ``services.award_bonus(...)``
        self.callee = callee
        self.line = line
        self.col = col
        self.stack = stack
        self.args = args          # list of (position or keyword, Entity)
        self.live = live          # entities read before the call
        self.caller = caller
        self.receiver = receiver  # Entity for x.method(...)
        #: the caller's checks an insert here could depend on, as they stood at the call
        self.checks: tuple = ()
        #: inside an ``except IntegrityError`` guard of the caller
        self.guarded = False
        #: the names the call's arguments read
        self.names: frozenset = frozenset()
        #: ``self.method(...)`` in a method: the callee is this class's own
        self.on_self = False


class Returned:
    """What a function returns when it returns an entity it read (a loader helper)."""

    __slots__ = ("info", "scopes", "line", "versioned", "policy")

    def __init__(self, info: GetInfo, scopes: tuple, line: int, versioned: bool,
                 policy: Optional[str] = None):
        self.info = info
        self.scopes = scopes        # the helper's transactions/locks at the read (end at return)
        self.line = line            # the read, in the helper's file
        self.versioned = versioned  # as the helper's module knows the model
        self.policy = policy        # likewise, the model's txnsafety policy
