"""What an insert's values and a lookup's values are made from.

A check-then-act is settled by a unique key only when the two racing inserts carry the
same key; whether they do depends on what each inserted value is made from: a constant
the code fixes, what the check looked up (the same in both requests that passed it), or
something each request makes for itself (a new uuid, the caller's argument).  These
functions read that from the syntax; ``rules/check_then_act.py`` decides with it.
"""
from __future__ import annotations

import re
from typing import Optional

import libcst as cst

from .syntax import LOOKUP_CALLS, STATEMENT_RUNNERS, chain, dotted, inserted_call, kids, terminal, walk_nodes

#: what an inserted column's value is made from: the names it reads, constants left out
InsertValues = dict[str, frozenset[str]]

#: calls that turn a value into another spelling of itself (``str(user.id)``)
_CONVERSIONS = frozenset({"str", "int", "float", "bool", "len", "tuple", "list", "frozenset", "set"})


#: a deployment's configuration, read the same in every request: ``settings.ADMIN_USER``,
#: ``config.username``, ``current_app.config["ADMIN"]``, ``app.config.get("GROUP")``
_CONFIGURATION = re.compile(r"^(?:settings|config|conf|cfg)(?:\.|$)|\.config(?:\.|$)")


def _configuration_read(node: cst.CSTNode) -> bool:
    return isinstance(node, (cst.Attribute, cst.Subscript, cst.Call)) and \
        bool(_CONFIGURATION.search(dotted(node.func if isinstance(node, cst.Call) else node)))


def _names_outside_configuration(expr: cst.CSTNode) -> set[str]:
    """:func:`names_in` (attribute names are no variables, a lambda's are its own), leaving
    out the names only a configuration read uses."""
    out: set[str] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        if _configuration_read(node):
            if isinstance(node, cst.Call):     # ``config.get(key)``: the key may be the request's
                stack.extend(arg.value for arg in node.args)
            elif isinstance(node, cst.Subscript):
                stack.extend(kids(node.slice[0]) if node.slice else [])
            continue
        if isinstance(node, cst.Attribute):
            stack.append(node.value)
        elif isinstance(node, cst.Name):
            out.add(node.value)
        elif not isinstance(node, cst.Lambda):
            stack.extend(kids(node))
    return out


def value_origins(expr: cst.CSTNode) -> frozenset[str]:
    """The variables a value is made from, as far as a racing request could make it
    differently: names written like constants or classes (``DEFAULT_SLUG``,
    ``Agent.Kind.PUBLIC``), the deployment's configuration (``settings.ADMIN_USER``,
    ``current_app.config["ADMIN"]``) and conversions (``str(...)``) are the same in every
    request, so they are left out; ``frozenset()`` is a value fixed by the code itself."""
    names = _names_outside_configuration(expr)
    # ``None`` stays: NULLs never collide on a unique key, so a column set to None is no key
    return frozenset(n for n in names if n[:1].islower() and n not in _CONVERSIONS) | (names & {"None"})


#: the request context an object layer's constructor takes first (oslo.versionedobjects'
#: ``Trait(context, name=n)``, ``ActionDescription(ctx)``): not a column
_CONTEXT_ARG = re.compile(r"^(?:ctx|context|\w+_(?:ctx|context))$")


def constructor_values(call: cst.Call) -> Optional[InsertValues]:
    """The columns a model constructor (``M(a=x, b=CONST)``) sets and what each is made
    from; None when positional or ``**`` arguments hide some.  A leading request context
    (``M(ctx, a=x)``, OpenStack's object layer) is no column."""
    out: InsertValues = {}
    for i, arg in enumerate(call.args):
        if arg.keyword is None:
            if i == 0 and arg.star == "" and isinstance(arg.value, cst.Name) and _CONTEXT_ARG.match(arg.value.value):
                continue
            return None
        out[arg.keyword.value] = value_origins(arg.value)
    return out


def inserted_object(node: cst.CSTNode) -> Optional[str]:
    """The variable an insert stores: ``obj`` of ``session.add(obj)`` or ``obj.save()``."""
    if not isinstance(node, cst.Call):
        return None
    term = terminal(node)
    if term == "add" and node.args and isinstance(node.args[0].value, cst.Name):
        return node.args[0].value.value
    if term in ("save", "put", "create") and isinstance(node.func, cst.Attribute) and \
            isinstance(node.func.value, cst.Name):
        return node.func.value.value            # ``obj.create()``: an object layer's insert
    return None


def insert_values(node: cst.CSTNode) -> Optional[InsertValues]:
    """:func:`constructor_values` of an insert made inline: ``M.objects.create(...)``,
    ``session.add(M(...))``, ``M(...).save()``."""
    call = inserted_call(node)
    return None if call is None else constructor_values(call)


_COLUMN_FUNCTIONS = frozenset({"F", "Coalesce", "Greatest", "Least", "Concat", "ExpressionWrapper"})


def update_changes_relative(call: cst.Call) -> bool:
    """Whether an update's new values are made from the row's own columns (``n=F("n") + 1``,
    ``{M.n: M.n + 1}``, ``func.coalesce(M.n, 0) + 1``): its change is lost when it matches no
    row and the insert that replaces it fails on a racing twin.  An update to plain values
    (``valid=False``, ``name=new_name``, the no-op ``{M.c: M.c}`` that only takes a lock)
    loses nothing that way: the row a racing request inserted already holds such values."""
    _, calls, _ = chain(call)
    if terminal(call) == "execute" and call.args and isinstance(call.args[0].value, cst.Call):
        calls = calls + chain(call.args[0].value)[1]        # ``execute(update(M).values(...))``
    for c in [call, *calls]:
        if terminal(c) not in ("update", "values"):
            continue
        for arg in c.args:
            for node in walk_nodes(arg.value):
                if isinstance(node, cst.BinaryOperation):
                    return True
                if isinstance(node, cst.Call) and (dotted(node.func).rsplit(".", 1)[-1] in _COLUMN_FUNCTIONS
                                                   or dotted(node.func).startswith("func.")):
                    return True
    return False


def lookup_values(call: cst.Call) -> frozenset[str]:
    """What the values a lookup compares are made from (:func:`value_origins`):
    ``{"user", "self"}`` for ``filter(M.user_id == user.id, M.topic_id == self.id)``.  Two
    requests that pass the same check looked up the same values, so a column of their
    inserts made only from these is the same in both."""
    found: set[str] = set()
    _, calls, _ = chain(call)
    for c in calls:
        if terminal(c) in STATEMENT_RUNNERS and c.args and isinstance(c.args[0].value, cst.Call) and \
                c.args[0].keyword is None:
            found |= lookup_values(c.args[0].value)    # ``session.execute(select(M).where(M.a == x))``
            continue
        if terminal(c) not in LOOKUP_CALLS:
            continue
        for arg in c.args:
            value = arg.value
            if arg.keyword is None and isinstance(value, cst.Comparison) and len(value.comparisons) == 1:
                value = value.comparisons[0].comparator
            found |= value_origins(value)
    return frozenset(found)
