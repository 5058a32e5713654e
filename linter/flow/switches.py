"""Parameters that switch a helper's write on: ``def generate_slug(self, commit=False)``.

Django's convention (``form.save(commit=False)``, many projects' ``create_x(commit=False)``)
is a helper that prepares a row and saves it only when asked: ``if commit: self.save()``.
A caller that does not pass the switch (or passes a false literal) gets no write from the
helper, so the read it did before the call and the helper's write are no read-modify-write
of the caller's: the write never runs on that path (issue 31's "paths that cannot happen").

The walk records, for each parameter a function writes, the switches every one of those
writes sits under (:func:`guarding`); a call site keeps which keyword arguments it passes
with a value that may be true and how many it passes by position (:class:`Passed`);
:func:`reaches` tells whether the call can reach the write.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

import libcst as cst

#: literals that leave a switch off
_FALSY = frozenset({"False", "None"})


def off_by_default(param: cst.Param) -> bool:
    """A parameter whose default is a false literal (``commit=False``, ``save=None``, ``0``)."""
    default = param.default
    if isinstance(default, cst.Name):
        return default.value in _FALSY
    return isinstance(default, cst.Integer) and default.value == "0"


def switch_tested(test: cst.BaseExpression, switches: frozenset[str]) -> Optional[str]:
    """The switch ``if commit:`` (or ``if commit is True:``) tests, None for any other test."""
    if isinstance(test, cst.Name) and test.value in switches:
        return test.value
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and \
            isinstance(test.left, cst.Name) and test.left.value in switches:
        comp = test.comparisons[0]
        if isinstance(comp.operator, (cst.Is, cst.Equal)) and isinstance(comp.comparator, cst.Name) and \
                comp.comparator.value == "True":
            return test.left.value
    return None


@dataclasses.dataclass(frozen=True)
class Passed:
    """What a call passes that may switch a write on: keywords whose value may be true, the
    number of positional arguments, and whether ``*args`` / ``**kwargs`` hide the rest."""

    keywords: frozenset[str] = frozenset()
    positional: int = 0
    unpacked: bool = False


def passed(call: cst.Call) -> Passed:
    keywords: set[str] = set()
    positional = 0
    unpacked = False
    for arg in call.args:
        if arg.star:
            unpacked = True
        elif arg.keyword is not None:
            value = arg.value
            if not (isinstance(value, cst.Name) and value.value in _FALSY):
                keywords.add(arg.keyword.value)
        else:
            positional += 1
    return Passed(frozenset(keywords), positional, unpacked)


def reaches(callee: Any, param: str, given: Optional[Passed]) -> bool:
    """Whether a call of ``callee`` (a ``FunctionState``) that passes ``given`` can reach its
    write of ``param``: yes when no switch guards that write, when the call is not known, or
    when it may turn one of the switches on."""
    guards = callee.param_write_guards.get(param)
    if not guards or given is None or given.unpacked:
        return True
    positional = set(callee.call_order()[:given.positional])
    return bool(guards & (given.keywords | positional))
