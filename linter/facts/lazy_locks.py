"""Row locks that are never taken in time: a ``select_for_update()`` queryset kept in a name
and first run by its own ``update()`` or ``delete()``.

A Django queryset takes its row locks when it is evaluated, not when it is built, so
``parent = M.objects.filter(pk=pk).select_for_update()`` locks nothing on that line. When
the first thing done with ``parent`` is ``parent.update(n=F("n") + 1)``, the lock is taken
by that UPDATE, after every read the function made in between: the code reads as if the
parent row were held while it computed from it, and it was not. These facts are syntax
only (names, lines, calls); ``rules/lazy_lock.py`` judges them.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Iterator, Optional

import libcst as cst

from .syntax import chain, code_of, iter_calls, kids, terminal

#: what a queryset's own statement does without being evaluated first
_SELF_RUNNING = frozenset({"update", "delete"})
#: calls that write or insert a row (on any receiver)
_WRITES = frozenset({"save", "asave", "create", "acreate", "bulk_create", "add", "add_all", "put"})


@dataclasses.dataclass(frozen=True)
class LazyLock:
    """A ``select_for_update()`` queryset bound to ``name`` at ``bound`` and first run by
    ``name.<verb>()`` at ``first_use``; ``reads`` calls were made in between and ``writes``
    are the lines of the writes after the binding (besides the queryset's own). A queryset
    never run at all (a bare ``M.objects.select_for_update().filter(...)`` statement, or a
    name never used) has no ``first_use``; its reads are those after it."""

    name: str
    bound: int
    first_use: Optional[int]
    verb: Optional[str]
    reads: int
    writes: tuple[int, ...]


def lazy_locks(func: cst.FunctionDef, line: Callable[[cst.CSTNode], int]) -> list[LazyLock]:
    """The lazy locks of one function body (nested functions left out)."""
    bound, bare = _bound_locks(func.body, line)
    if not bound and not bare:
        return []
    calls = sorted(((line(c), c) for c in iter_calls(func.body)), key=lambda x: x[0])
    names = sorted((line(n), n.value) for n in _own_nodes(func.body)
                   if isinstance(n, cst.Name) and n.value in bound)
    out = []
    for name, at in list(bound.items()) + bare:
        if name in bound and any(n == name and ln > at for ln, n in names):
            first = _first_use(name, at, names, calls)
            if first is None:
                continue            # evaluated or handed on before anything else: a real lock
            use_line, verb = first
        else:
            use_line, verb = None, None       # never runs: the lock is never taken
        end = use_line if use_line is not None else 1 << 30
        reads = sum(1 for ln, c in calls if at < ln < end and isinstance(c.func, cst.Attribute))
        writes = tuple(ln for ln, c in calls if ln > at and ln != use_line and terminal(c) in _WRITES)
        out.append(LazyLock(name, at, use_line, verb, reads, writes))
    return out


def _bound_locks(body: cst.CSTNode, line: Callable[[cst.CSTNode], int]
                 ) -> tuple[dict[str, int], list[tuple[str, int]]]:
    """``name = <chain with select_for_update()>`` bound once, to the chain itself (not to an
    evaluation of it such as ``.get()`` or ``list(...)``); and bare statements of such a
    chain, which nothing ever runs (named by their code)."""
    found: dict[str, int] = {}
    bare: list[tuple[str, int]] = []
    seen: set[str] = set()
    for node in _own_nodes(body):
        if isinstance(node, cst.Expr) and isinstance(node.value, cst.Call) and _lazy_chain(node.value):
            bare.append((code_of(node.value), line(node)))
            continue
        if not isinstance(node, cst.Assign) or len(node.targets) != 1:
            continue
        target = node.targets[0].target
        if not isinstance(target, cst.Name):
            continue
        if target.value in seen:
            found.pop(target.value, None)       # bound twice: which binding runs is unclear
            continue
        seen.add(target.value)
        value = node.value
        if isinstance(value, cst.Call) and terminal(value) == "select_for_update" or \
                isinstance(value, cst.Call) and _lazy_chain(value):
            found[target.value] = line(node)
    return found, bare


def _own_nodes(body: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The nodes of a function body, without those of functions or classes defined in it
    (their names and locks are theirs)."""
    stack = [body]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(k for k in kids(node) if not isinstance(k, (cst.FunctionDef, cst.ClassDef, cst.Lambda)))


def _lazy_chain(call: cst.Call) -> bool:
    """``...select_for_update().filter(...)``: still a queryset, locking when it runs."""
    _names, calls, _root = chain(call)
    locking = [i for i, c in enumerate(calls) if terminal(c) == "select_for_update"]
    return bool(locking) and all(terminal(c) in ("filter", "exclude", "order_by", "select_related",
                                                 "only", "defer", "using")
                                 for c in calls[:locking[-1]])


def _first_use(name: str, at: int, names: list, calls: list) -> Optional[tuple[int, str]]:
    """The line and verb of ``name``'s first use after ``at`` when it is its own
    ``update()`` / ``delete()``; None when it is used any other way first (evaluated,
    handed on) or never."""
    uses = [ln for ln, n in names if n == name and ln > at]
    if not uses:
        return None
    first = uses[0]
    for ln, c in calls:
        if ln == first and terminal(c) in _SELF_RUNNING and isinstance(c.func, cst.Attribute) \
                and code_of(c.func.value) == name:
            return first, terminal(c)
    return None
