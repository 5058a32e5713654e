"""Values a function makes for itself: keys no other request can look up at the same moment.

A check-then-act races only when two requests look up the *same* key.  A key the function
has just minted cannot be another request's: the URL of an issue it has just opened in a
tracker (``new = tracker.create_issue(..)``, then ``get_or_create(url=new.url)``), the id of
a row it has just inserted, a fresh ``uuid4()`` or ``secrets.token_hex()``.  Kiwi TCMS's
bug-tracker integrations do exactly this, eight times.  The row such a lookup guards is
not shared yet (the rubric's "rows not shared yet").

This module only reads the syntax: which local names hold such a value, directly or through
other locals made from one (``new_url = base + new_issue.key``).  The rules decide.
"""
from __future__ import annotations

import re

import libcst as cst

from .syntax import names_in, terminal, walk_nodes

#: calls whose result is new: a created row or remote object, a fresh random token
_MINTING = re.compile(r"^(?:create|new|mint|generate)(?:_\w+)?$|^(?:create|new)[A-Z]\w*$|"
                      r"^(?:uuid1|uuid4|token_hex|token_urlsafe|token_bytes|urandom|get_random_string)$")


def _targets(node: cst.CSTNode) -> list[str]:
    """The plain names an assignment binds (``a = ..``, ``a, b = ..``, ``a: T = ..``)."""
    if isinstance(node, cst.Assign):
        exprs = [t.target for t in node.targets]
    elif isinstance(node, cst.AnnAssign) and node.value is not None:
        exprs = [node.target]
    else:
        return []
    out: list[str] = []
    for expr in exprs:
        if isinstance(expr, cst.Name):
            out.append(expr.value)
        elif isinstance(expr, (cst.Tuple, cst.List)):
            out.extend(e.value.value for e in expr.elements if isinstance(e.value, cst.Name))
    return out


def mints(expr: cst.CSTNode) -> bool:
    """Whether ``expr`` calls something that makes a new object or key."""
    return any(isinstance(n, cst.Call) and _MINTING.match(terminal(n) or "") for n in walk_nodes(expr))


def minted_names(fnode: cst.CSTNode) -> frozenset[str]:
    """The locals of ``fnode`` that hold a value it minted, or one made from such a value.

    A name also bound to anything else in the function is left out: which binding a lookup
    sees is not known here."""
    assigns = [(node, _targets(node)) for node in walk_nodes(fnode) if isinstance(node, (cst.Assign, cst.AnnAssign))]
    minted: set[str] = set()
    while True:                     # a name made from one minted later in the walk order
        grown = {name for node, names in assigns if node.value is not None and
                 (mints(node.value) or names_in(node.value) & minted) for name in names}
        if grown <= minted:
            break
        minted |= grown
    other = {name for node, names in assigns if not (node.value is not None and (
        mints(node.value) or names_in(node.value) & minted)) for name in names}
    return frozenset(minted - other)
