"""A parameter handed on to a function that writes it is written by the function handing it.

``clean_otp`` loads a device and passes it to ``_verify_token(user, token, device)``, which
calls ``device.verify_token(token)``, a model method that changes and saves its row.  The
walk records a function's own writes of its parameters (``FunctionAnalyzer.param_writes``)
and ``resolve_calls`` judges them at each call against the caller's read; a write two calls
down was lost on the way.  :func:`pass_on` closes that gap before the calls are judged: a
call that hands a parameter (or the row a method is called on) to a callee writing it,
with no transaction or lock of the caller's around the call, adds that write to the
caller's summary, the write's line being the call's.  The functions that call the
functions so summarised are then analysed (they may hold the read), to a fixed point of
three levels (names of two words or more only, as for loader methods on any object).
"""
from __future__ import annotations

import re
from typing import Callable, Iterator

from ..flow.switches import reaches

_ROUNDS = 3


def pass_on(mods: dict, sites: list, lookup: Callable) -> None:
    """Propagate parameter writes up the calls of ``sites`` (analysing new callers)."""
    for _round in range(_ROUNDS):
        grew: set[str] = set()
        for site in list(sites):
            callee = lookup(site)
            caller = site.caller
            if callee is None or callee is caller or not callee.param_writes or \
                    caller.outer is not None or any(s.kind for s in site.stack if not s.decorator):
                continue
            for pname, ent in _pairs(site, callee):
                if ent.source != "param" or caller.params.get(ent.name) is not ent or \
                        ent.name in caller.param_writes or not reaches(callee, pname, site.passed):
                    continue
                _w_line, relevant, kind = callee.param_writes[pname]
                caller.param_writes[ent.name] = (site.line, relevant, kind)
                caller.param_write_guards[ent.name] = site.switches
                if _specific(caller.name):
                    grew.add(caller.name)
        if not grew or not _analyse_callers_of(mods, grew, sites):
            return


def _specific(name: str) -> bool:
    """Whether calls of ``name`` are worth finding by text: two words or more (``_verify_token``,
    ``apply_discount``); a one-word ``update`` or ``save`` is every other class's too, and
    analysing each of their callers costs more than a large project's whole run."""
    return "_" in name.strip("_") and not name.startswith("__")


def _pairs(site, callee) -> Iterator[tuple]:
    """(callee parameter, the caller's entity handed to it) for each written parameter."""
    order = callee.call_order()
    if site.receiver is not None and "self" in callee.param_writes:
        yield "self", site.receiver
    for key, ent in site.args:
        pname = key if isinstance(key, str) else (order[key] if key < len(order) else None)
        if pname is not None and pname in callee.param_writes:
            yield pname, ent


def _analyse_callers_of(mods: dict, names: set[str], sites: list) -> bool:
    """Analyse the functions not analysed yet that call one of ``names``; whether any was."""
    pattern = re.compile(r"\b(?:%s)\(" % "|".join(sorted(re.escape(n) for n in names)))
    found = False
    for m in mods.values():
        found = m.analyze_matching(pattern, sites, frozenset(names)) or found
    return found
