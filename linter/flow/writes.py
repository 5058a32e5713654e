"""Writes of entities: what changed and what protection the write has, emitted as
:class:`~.events.Written` for the read-modify-write rules and TXN103 (``rules/subscriptions.py``).

One part of :class:`.walk.FunctionAnalyzer`, the per-function walk; it only
records facts and emits events.
"""
from __future__ import annotations

from typing import Optional

import libcst as cst

from ..facts.model import Entity
from .events import Stored, Written


class WriteFacts:
    """Writes of entities, emitted for the read-modify-write rules."""

    # -- writes
    def write(self, ent: Entity, node: cst.CSTNode, kind: str, fields, verb: str,
              line: Optional[int] = None) -> None:
        w_line = line if line is not None else self.line(node)
        self.write_lines.append(w_line)
        relevant = ent.relevant(kind, fields)
        if ent.source == "self":
            # a model method that sets fields from arguments or other fields writes what the
            # caller asked for; one that derives a field from its own old value loses updates
            # (or one from another column written with it: ``original_state = state; state = x``)
            written_attrs = {m.attr for m in ent.pending} if fields is None else set(fields)
            relevant = [m for m in relevant if m.kind == "counter" or (m.kind == "derived" and (
                m.own or m.reads & (written_attrs - {m.attr})))]
            if relevant and ent.name == "self" and not any(s.kind for s in self.stack if not s.decorator):
                # callers that read the row are judged at their call (resolve_calls)
                self.note_param_write("self", (w_line, relevant, kind))
        written = [m for m in ent.pending if kind != "fields" or fields is None or m.attr in fields]
        self.emit(Stored(w_line, tuple(self.stack), ent, tuple(written), verb))   # a claim? (rules/claim.py)
        self.work_lines.append(w_line)
        if kind == "fields" and fields is not None:
            ent.pending = [m for m in ent.pending if m.attr not in fields]
        else:
            ent.pending = []
        ent.writes.append(w_line)
        if not relevant:
            return
        ent.had_rmw = True
        if ent.source != "param" and ent.getter:
            self.rmw_getters.setdefault(ent.getter, (ent.read_line, w_line))
        stack = tuple(self.stack)
        if ent.source == "param":
            # only the protection taken here counts; none: the callers' business (a summary)
            stack = tuple(s for s in stack if not s.decorator and
                          not (self.outer and s in self.outer.stack))
            if not stack and ent.name in self.params and self.outer is None:
                self.note_param_write(ent.name, (w_line, relevant, kind))
        self.emit(Written(w_line, stack, ent, tuple(relevant), kind,
                          frozenset(fields) if fields is not None else None, verb, node,
                          at_node=line is None))

    def flush_all(self, node: cst.CSTNode, verb: str, line: Optional[int] = None,
                  session: Optional[str] = None) -> None:
        for ent in list({id(e): e for e in self.entities.values()}.values()):
            if not ent.pending:
                continue
            if session and ent.session and session.split(".")[-1] != ent.session.split(".")[-1]:
                continue
            if ent.framework in ("django", "ndb"):
                continue
            if ent.framework is None and ent.source == "param" and \
                    "sqlalchemy" not in self.mod.info.frameworks:
                continue
            self.write(ent, node, "flush", None, verb=verb, line=line)
