"""TXN105, a row used then consumed: read without a row lock, acted on, then deleted.

A queue runner reads the waiting messages, sends each, then deletes it; an invitation view
reads the invite by its token, adds the user to the team, then deletes the invite.  The
delete is what makes the row single-use, but it comes after the work: two workers (two
requests) that both read the row before either deletes it both do the work (the mail goes
out twice, one invite lets two people in) and both deletes succeed, the second one
deleting nothing.  A plain transaction does not help: at READ COMMITTED both read the row.

What settles it: the row read with ``select_for_update()`` (``nowait``/``skip_locked`` for
queues) in the transaction that deletes it, a lock held from the read to the delete, a
version column, or a conditional delete done *first* (``filter(pk=x.pk).delete()`` and act
only when it deleted a row).

Only work that does harm twice counts, between the read and the delete:

* a side effect that leaves the process (the vocabulary's side effects, and a ``send()``
  that is not a signal's: an e-mail, a message), or
* a membership change through the consumed row (``invite.team.members.add(u)``): what the
  row grants, granted twice.

Work on another branch than the delete (``if resend: send() else: delete()``) is none.

A row deleted after logging, or after writing rows the delete does not guard, is not taken
for a single-use row (an admin deleting an object is not a race worth reporting).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import libcst as cst

from ..facts.config import name_matches
from ..facts.model import Confidence
from ..facts.syntax import dotted, kwarg, terminal
from ..flow.events import Called
from .claim import settled
from . import severity

if TYPE_CHECKING:
    from ..flow.state import FunctionState

#: calls that send something out of the process (besides the vocabulary's side effects)
_SENDS = frozenset({"send", "send_mail", "send_messages", "send_email", "send_sms", "deliver"})
#: calls through a row's relation that change who or what it grants (a team's members):
#: a child row created or updated through it is most often a log entry or a reassignment
_RELATED_WRITES = frozenset({"add", "remove", "set", "clear"})


def on_call(fa: "FunctionState", event: Called) -> None:
    """Note the work a call does, or judge the delete it is (subscribed to ``CALL``)."""
    call = event.node
    term = terminal(call)
    func = call.func
    recv = func.value if isinstance(func, cst.Attribute) else None
    line = event.line
    if recv is None:
        if name_matches(dotted(func), fa.vocab.side_effects):
            fa.effects.append((line, None, call))
        return
    recv_path = dotted(recv)
    if term == "delete" and not call.args and recv_path in fa.entities:
        _judge(fa, call, fa.entities[recv_path], line)
        return
    if _sends(fa, call, term):
        fa.effects.append((line, None, call))
    elif term in _RELATED_WRITES and recv_path.count(".") >= 2:
        root = recv_path.split(".", 1)[0]
        if root in fa.entities and root not in ("self", "cls"):
            fa.effects.append((line, root, call))


def _sends(fa: "FunctionState", call: cst.Call, term: str) -> bool:
    if name_matches(dotted(call.func), fa.vocab.side_effects) and not fa.is_write_name(term):
        return True
    # ``mail.send()``, ``msg.send(fail_silently=True)``; a signal's ``send(sender, ...)`` is not out
    return term in _SENDS and not any(a.keyword is None for a in call.args) and \
        kwarg(call, "sender") is None


def _judge(fa: "FunctionState", call: cst.Call, ent, line: int) -> None:
    if ent.source not in ("get", "loop", "call") or settled(ent, tuple(fa.stack)):
        return
    work = _work(fa, ent, call, line)
    if work is None or not fa.mod.cfg.code_enabled("TXN105"):
        return
    framework = ent.framework or fa.framework_hint()
    fa.report(call, "TXN105", message(ent, work, line, framework), confidence=Confidence.MEDIUM,
              assessment=severity.of_claim(ent, ()))


def _work(fa: "FunctionState", ent, delete: cst.Call, line: int) -> Optional[int]:
    """The first line of harmful work done between ``ent``'s read and its delete at ``line``
    on a path to the delete."""
    parents = None
    for w_line, root, node in fa.effects:
        if ent.read_line <= w_line < line and (root is None or root == ent.name):
            parents = parents if parents is not None else _parents(fa.node)
            if not _exclusive(parents, node, delete):
                return w_line
    return None


def _parents(root: cst.CSTNode) -> dict[int, cst.CSTNode]:
    out: dict[int, cst.CSTNode] = {}
    stack = [root]
    while stack:
        node = stack.pop()
        for child in node.children:
            out[id(child)] = node
            stack.append(child)
    return out


def _path(parents: dict, node: cst.CSTNode) -> list[cst.CSTNode]:
    path = [node]
    while id(path[-1]) in parents:
        path.append(parents[id(path[-1])])
    return path[::-1]


def _exclusive(parents: dict, a: cst.CSTNode, b: cst.CSTNode) -> bool:
    """Whether ``a`` and ``b`` lie on different branches of one ``if``."""
    pa, pb = _path(parents, a), _path(parents, b)
    for i, (x, y) in enumerate(zip(pa, pb)):
        if x is not y:
            return i > 0 and isinstance(pa[i - 1], cst.If)
    return False


def message(ent, work_line: int, line: int, framework: Optional[str]) -> str:
    fix = ("read it with with_for_update() in the transaction that deletes it, or delete it "
           "first with a conditional DELETE and act only if it removed a row") \
        if framework == "sqlalchemy" else \
        ("read it with select_for_update() (skip_locked=True for a queue) inside the "
         "transaction.atomic() that deletes it, or delete it first (filter(pk=...).delete()) "
         "and act only if it removed a row")
    where = f"read by {ent.via}" if ent.source == "call" and ent.via else "read"
    return (f"TXN105 check-then-act: `{ent.name}` {where} at line {ent.read_line} without a row "
            f"lock, acted on at line {work_line} and deleted at line {line}: two workers can both "
            f"read it before either deletes it and both do the work; {fix}")
