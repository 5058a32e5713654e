"""Writes of entities, judged by the read-modify-write rules.

One part of :class:`.dataflow.FunctionAnalyzer`, the per-function walk; it only
records facts and hands verdicts to the rules.
"""
from __future__ import annotations

from typing import Optional

import libcst as cst

from .model import Confidence, Entity
from .module_facts import protection_needed
from .rules.claim import claimed
from .rules import two_copies
from .rules.read_modify_write import compose, judge


class WriteFacts:
    """Writes of entities, judged by the read-modify-write rules."""

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
                self.param_writes.setdefault("self", (w_line, relevant, kind))
        written = [m for m in ent.pending if kind != "fields" or fields is None or m.attr in fields]
        found = claimed(ent, written, tuple(self.stack))
        if found is not None:
            self.claims.append((found, w_line, verb))
        self.work_lines.append(w_line)
        if kind == "fields" and fields is not None:
            ent.pending = [m for m in ent.pending if m.attr not in fields]
        else:
            ent.pending = []
        ent.writes.append(w_line)
        if not relevant:
            return
        ent.had_rmw = True
        self.check_internal(ent, w_line)
        if ent.source != "param" and ent.getter:
            self.rmw_getters.setdefault(ent.getter, (ent.read_line, w_line))
        stack = tuple(self.stack)
        if ent.source == "param":
            own = tuple(s for s in stack if not s.decorator and
                        not (self.outer and s in self.outer.stack))
            if not own:
                if ent.name in self.params and self.outer is None:
                    self.param_writes.setdefault(ent.name, (w_line, relevant, kind))
                return
            stack = own
        result = judge(ent, stack, relevant, self.vocab)
        if result is None:
            return
        code, detail = result
        msg = compose(code, ent, w_line, verb, relevant, detail, self.vocab)
        col = 0 if line is not None else self.col(node)
        # an unprotected helper is fine when every caller protects it: with a lock, for a
        # model that only a lock protects
        blind = all(m.kind == "blind" for m in relevant)     # a stale copy, nothing derived
        # ``save(update_fields=["image"])`` of a value made from *other* columns of the read
        # (a file name, a cart id): stale only if those columns change meanwhile
        # (a SQLAlchemy flush writes only the changed columns, as update_fields does)
        other_columns = kind in ("fields", "flush") and \
            all(m.kind == "derived" and not m.own for m in relevant)
        self.reported_write_lines.add(w_line)
        if not (blind or other_columns):
            self.sure_write_lines.add(w_line)
        self.report(w_line, code, msg, col=col, deferrable=code in ("TXN102", "TXN106")
                    and ent.source != "param", need=protection_needed(ent.policy),
                    confidence=Confidence.LOW if blind or other_columns else Confidence.HIGH)

    def check_internal(self, ent: Entity, w_line: int) -> None:
        """TXN103 in one function: two objects for the same row, both written."""
        other = two_copies.overwritten_by(ent, set(self.entities.values()), w_line)
        if other is not None:
            self.report(w_line, two_copies.CODE, two_copies.message(ent, other, w_line))

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
