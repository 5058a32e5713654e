"""The records the per-function walk keeps: source positions, call sites, returned rows,
pending claims and findings deferred to the callers."""
from __future__ import annotations

import bisect
import dataclasses
from typing import Callable, Optional

import libcst as cst

from ..facts.model import Act, Assessment, Check, Entity, Finding, Mutation, Need
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

    def last_line(self, node: cst.CSTNode) -> int:
        span = self.spans[node]
        return bisect.bisect_right(self.starts, span.start + max(span.length - 1, 0))

    def col(self, node: cst.CSTNode) -> int:
        start = self.spans[node].start
        return start - self.starts[bisect.bisect_right(self.starts, start) - 1]


class CallSite:
    __slots__ = ("callee", "line", "col", "stack", "args", "live", "caller", "receiver",
                 "module_alias", "checks", "guarded", "names", "on_self", "passed", "switches")

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
        #: what the call passes that may switch the callee's writes on (switches.py)
        self.passed = None
        #: the caller's switches tested true around the call
        self.switches: frozenset = frozenset()


class Returned:
    """What a function returns when it returns an entity it read (a loader helper)."""

    __slots__ = ("info", "scopes", "line", "versioned", "policy", "position")

    def __init__(self, info: GetInfo, scopes: tuple, line: int, versioned: bool,
                 policy: Optional[str] = None, position: Optional[int] = None):
        self.info = info
        #: the row's place in a returned tuple (``return artifact, parent``), None: returned alone
        self.position = position
        self.scopes = scopes        # the helper's transactions/locks at the read (end at return)
        self.line = line            # the read, in the helper's file
        self.versioned = versioned  # as the helper's module knows the model
        self.policy = policy        # likewise, the model's txnsafety policy


@dataclasses.dataclass(frozen=True)
class Claim:
    """A write that sets back a column its row was selected by (``rules/claim.py`` decides
    whether one is made; the walk keeps it until the function's end, when whether it matters
    is known)."""

    entity: Entity
    columns: tuple[str, ...]
    #: the mutations the write carries (the claimed columns and whatever is set with them)
    written: tuple[Mutation, ...]


@dataclasses.dataclass(frozen=True)
class PendingClaim:
    """A claim made by the write at ``line`` (``verb``: how the message says it was written)."""

    claim: Claim
    line: int
    verb: str


@dataclasses.dataclass(frozen=True)
class PendingUpdateClaim:
    """An update at ``line`` that sets back the state its rows were selected by
    (``filter(id__in=ids).update(owner=me)``), judged at the function's end like a
    :class:`PendingClaim`: ``selection``, the variable of the selected rows (``selected_at``, the
    line of the query it came from: every list made from that query is the same rows); ``same_for_all``,
    every claimed column set to a literal; ``message`` and ``assessment``, the finding reported
    if the claim matters."""

    node: cst.Call
    #: the update's first and last lines (the selection named inside it is not handed on)
    line: int
    last_line: int
    selection: str
    selected_at: int
    same_for_all: bool
    message: str
    assessment: Assessment


#: how a deferred finding is settled once the project's callers are known: the finding, the
#: lines that use the rows (writes, row methods), whether a caller was seen, and whether no
#: caller the project shows leaves it unprotected -> the finding to report
Settle = Callable[[Finding, list, bool, bool], Finding]


@dataclasses.dataclass
class Deferred:
    """A finding of an unprotected helper, left to its callers (``project/call_joins.py``):
    reported only when a caller does not hold ``need`` around the
    call; ``settle``, from the rule that made it, adjusts it with what the callers showed."""

    finding: Finding
    need: Need
    settle: Optional[Settle] = None


@dataclasses.dataclass(frozen=True)
class SettledInsert:
    """An insert a unique key settled after a lookup missed, and the call that made it."""

    check: Check
    act: Act
    node: cst.CSTNode


@dataclasses.dataclass
class HelperChecks:
    """What the walk of one function keeps of checks made in helpers (``presence.py``)."""

    #: inserts a unique key settled (the get-or-create contract: ``rules/get_or_create.py``)
    settled: list[SettledInsert] = dataclasses.field(default_factory=list)
    #: names holding a helper's :class:`Presence` (a check kept in a variable)
    names: set = dataclasses.field(default_factory=set)
    #: inside an ``except ...NotFound:`` handler of a lookup: ``row = None`` there keeps the
    #: row's name, as "the row or None"
    missing: int = 0
