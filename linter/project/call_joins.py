"""Joining call sites to the functions they call, once every function is analysed.

Three things happen at a join (``ModuleAnalyzer.resolve_calls`` runs them):

* **summaries flow up**: a helper that re-reads and writes a row (``rmw_getters``) makes
  its callers, and theirs, re-read and write it too (TXN103 across calls);
* **each call is handed to the rules** as a ``CallResolved`` event, the caller's state with
  it: a parameter the callee writes is the caller's row written (``read_modify_write``), a
  helper's own re-read-and-write under the caller's read (``two_copies``), an insert in the
  callee after a check in the caller (``check_then_act``);
* **deferred findings settle**: an unprotected helper's finding (a read-modify-write, a
  claim, a ``select_for_update()`` outside a transaction) is fine when every caller the
  project shows calls it under the protection it needs, directly or because that caller is
  itself only ever called under protection; the others are reported, adjusted by the
  ``settle`` their rule gave (``flow.records.Deferred``).
"""
from __future__ import annotations

from typing import Callable, Optional

from ..flow.walk import CallSite, FunctionAnalyzer
from ..facts.model import Need
from ..flow.events import CallResolved

#: rounds of summaries flowing up the call graph (a helper's helper's helper)
_ROUNDS = 4


def _holds(site: CallSite, need: Need) -> bool:
    """Whether the caller holds the protection ``need`` at ``site``."""
    return need.held_by(site.stack)


class CallJoins:
    """Call sites joined to their callees (``lookup(site)``); ``complete(callee, n)``:
    whether ``n`` resolved calls are all the calls of ``callee`` there are."""

    def __init__(self, call_sites: list, lookup: Callable[[CallSite], Optional[FunctionAnalyzer]],
                 complete: Optional[Callable[[FunctionAnalyzer, int], bool]] = None):
        self.resolved = [(site, lookup(site)) for site in call_sites]
        self.complete = complete
        #: callee -> the sites that call it (recursive calls left out)
        self.callers: dict[int, list[CallSite]] = {}
        #: callee -> calls resolved to it, its calls of itself too
        self.seen: dict[int, int] = {}
        self._memo: dict[tuple[int, str], bool] = {}

    def run(self, modules: list) -> None:
        self.inherit_summaries()
        self.judge_calls()
        self.settle_deferred(modules)

    def inherit_summaries(self) -> None:
        """A helper's helpers count as its own: propagate re-read-and-write summaries up."""
        for _round in range(_ROUNDS):
            changed = False
            for site, callee in self.resolved:
                if callee is None or callee is site.caller or site.caller.outer is not None:
                    continue
                for found in (callee.rmw_getters, callee.inherited_rmw):
                    for getter, lines in found.items():
                        if getter not in site.caller.inherited_rmw and getter not in site.caller.rmw_getters:
                            site.caller.inherited_rmw[getter] = lines
                            changed = True
            if not changed:
                break

    def judge_calls(self) -> None:
        for site, callee in self.resolved:
            if callee is None:
                continue
            self.seen[id(callee)] = self.seen.get(id(callee), 0) + 1
            if callee is site.caller:
                continue        # recursion: protected exactly when the outer call is
            self.callers.setdefault(id(callee), []).append(site)
            site.caller.publish(CallResolved(site.line, site.stack, site, callee))

    def protected(self, fa: FunctionAnalyzer, need: Need, visiting: frozenset = frozenset()) -> bool:
        """Whether every call of ``fa`` holds ``need``, or comes from a function that is
        itself only ever called holding it (and the project shows every call)."""
        key = (id(fa), need)
        if key in self._memo:
            return self._memo[key]
        if id(fa) in visiting:
            return False
        sites = self.callers.get(id(fa), [])
        if fa.is_method and self.complete is not None and not self.complete(fa, self.seen.get(id(fa), 0)):
            self._memo[key] = False
            return False        # a call the analysis did not see may hold no protection
        ok = bool(sites) and all(_holds(site, need) or self.protected(site.caller, need, visiting | {id(fa)})
                                 for site in sites)
        self._memo[key] = ok
        return ok

    def shows_unprotected(self, fa: FunctionAnalyzer, need: Need, visiting: frozenset = frozenset()) -> bool:
        """Whether the project shows a path of calls into ``fa`` from an entry point (a
        function nothing calls that is not a method) with no protection on the way."""
        if id(fa) in visiting:
            return False
        for site in self.callers.get(id(fa), []):
            if _holds(site, need):
                continue
            up = site.caller
            if not self.callers.get(id(up)) and not up.is_method:
                return True             # an entry point calls it unprotected
            if self.shows_unprotected(up, need, visiting | {id(fa)}):
                return True
        return False

    def settle_deferred(self, modules: list) -> None:
        """An unprotected helper whose every caller calls it under protection is fine; the
        others' deferred findings are reported, saying whether a caller shows the gap."""
        for mod in modules:
            for fa in mod.functions.values():
                for deferred in fa.deferred:
                    if self.protected(fa, deferred.need):
                        continue
                    finding = deferred.finding
                    if deferred.settle is not None:
                        sites = self.callers.get(id(fa), [])
                        finding = deferred.settle(finding, fa.write_lines, bool(sites),
                                                  not self.shows_unprotected(fa, deferred.need))
                    mod.findings.append(finding)
                fa.deferred = []
