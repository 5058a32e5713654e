"""The read-modify-write rules: TXN101, TXN102, TXN104, TXN106 and TXN109.

One decision module for the codes that judge a write by how its row was read: given the
entity (its read and the transactions and locks around it), the protections around the
write and the mutations that make it a read-modify-write, :func:`judge` picks the code and
:func:`compose` writes the message (read site, write site, the fix for the framework).
"""
from __future__ import annotations

import dataclasses
import enum
import os
from typing import TYPE_CHECKING, Optional

from txnsafety.codes import Code

from ..facts.config import Vocab
from ..facts.model import Confidence, Entity, Finding, Scope
from ..facts.module_facts import LOCK_POLICIES, TXN_POLICIES, UNPROTECTED_POLICIES, protection_needed
from ..flow.events import CallResolved, Written
from ..flow.switches import reaches
from . import severity

if TYPE_CHECKING:
    from ..flow.state import FunctionState


class Reason(enum.Enum):
    """Why a read-modify-write earns its code: what protection the read and the write had."""

    UNPROTECTED = "unprotected"                 # no transaction or lock at the read or the write
    HALF_PROTECTED = "half-protected"           # read outside, written inside ``scope``
    LOCK_RELEASED = "released"                  # read FOR UPDATE, row lock ended (commit at ``line``)
    SCOPE_ENDED = "ended"                       # read inside ``scope``, written after it ended
    LOCK_BEFORE_COMMIT = "lock-before-commit"   # lock ``scope`` released before ``outer`` commits
    WEAK_ISOLATION = "weak isolation"           # one transaction ``scope``, no row lock, not serializable
    NO_LOCK = "no-lock"                         # a lock-only model written without it (``scope``: a txn)
    NO_TXN = "no-txn"                           # a transaction-only model written under lock ``scope``


@dataclasses.dataclass(frozen=True)
class Verdict:
    """A read-modify-write's code and why; :func:`compose` writes its message."""

    code: Code
    reason: Reason
    #: the protection the reason names (see :class:`Reason`)
    scope: Optional[Scope] = None
    #: the transaction that commits after a lock ended (``LOCK_BEFORE_COMMIT``)
    outer: Optional[Scope] = None
    #: the line the row lock ended at (``LOCK_RELEASED``)
    line: Optional[int] = None


def judge(ent: Entity, stack: tuple, relevant: list, vocab: Vocab) -> Optional[Verdict]:
    """Which code (if any) a read-modify-write of ``ent`` written under ``stack`` earns."""
    if ent.versioned or ent.policy in UNPROTECTED_POLICIES:
        return None
    counter = any(m.kind == "counter" for m in relevant)
    if ent.policy in TXN_POLICIES:
        return judge_txn(ent, stack, counter)
    if ent.locked_read:
        return None
    if ent.policy in LOCK_POLICIES:
        return judge_lock(ent, stack, counter)
    return _judge_scopes(ent, list(ent.scopes), list(stack), counter)


def _judge_scopes(ent: Entity, R: list, W: list, counter: bool) -> Optional[Verdict]:
    """The judgement of a read under scopes ``R`` and a write under ``W`` (outermost first),
    where every scope in them counts as protection."""
    r_ids = {id(s) for s in R}
    w_ids = {id(s) for s in W}
    if ent.for_update and ent.released_line is not None:
        return Verdict(Code.TXN104, Reason.LOCK_RELEASED, line=ent.released_line)
    if not R and not W:
        if ent.for_update:
            return None
        return Verdict(Code.TXN106 if counter else Code.TXN102, Reason.UNPROTECTED)
    if not R and W:
        if ent.for_update and ent.framework == "sqlalchemy":
            return None
        return Verdict(Code.TXN101, Reason.HALF_PROTECTED, W[-1])
    gone = [s for s in R if id(s) not in w_ids]
    if gone:
        return Verdict(Code.TXN104, Reason.SCOPE_ENDED, gone[-1])
    common = [s for s in W if id(s) in r_ids]
    locks = [s for s in common if s.kind == "lock"]
    if locks:
        lock = locks[0]
        idx = W.index(lock)
        outer_txn = [s for s in W[:idx] if s.kind == "txn"]
        if outer_txn:
            return Verdict(Code.TXN104, Reason.LOCK_BEFORE_COMMIT, lock, outer_txn[-1])
        return None
    if ent.for_update:
        return None
    if any(s.kind == "txn" and s.serializable for s in common):
        return None
    txn = common[-1]
    return Verdict(Code.TXN106 if counter else Code.TXN109, Reason.WEAK_ISOLATION, txn)


def judge_txn(ent: Entity, stack: tuple, counter: bool) -> Optional[Verdict]:
    """``judge`` for a model that only a transaction protects (``@written_in_transaction``),
    as the runtime's ``_transaction_problem`` judges it: user locks (``user_write_lock()``,
    ``fetch_under_lock()``, any configured lock) are not looked at, so a read-modify-write
    under a lock but outside a transaction is TXN102 (TXN106 for a counter), and a read
    under only a lock then written in a transaction is TXN101."""
    R = [s for s in ent.scopes if s.kind == "txn"]
    W = [s for s in stack if s.kind == "txn"]
    result = _judge_scopes(ent, R, W, counter)
    if result is not None and result.reason is Reason.UNPROTECTED:
        locks = [s for s in stack if s.kind == "lock"] or [s for s in ent.scopes if s.kind == "lock"]
        if locks:       # say why the lock held around it does not count
            return Verdict(result.code, Reason.NO_TXN, locks[-1])
    return result


def judge_lock(ent: Entity, stack: tuple, counter: bool) -> Optional[Verdict]:
    """``judge`` for a model that only a lock protects (``@written_with_user_lock``), as the
    runtime checker judges it: transactions and row locks do not count."""
    R = [s for s in ent.scopes if s.kind == "lock"]
    W = [s for s in stack if s.kind == "lock"]
    if not R and not W:
        txns = [s for s in stack if s.kind == "txn"] or [s for s in ent.scopes if s.kind == "txn"]
        return Verdict(Code.TXN106 if counter else Code.TXN102, Reason.NO_LOCK, txns[-1] if txns else None)
    if not R:
        return Verdict(Code.TXN101, Reason.HALF_PROTECTED, W[-1])
    w_ids = {id(s) for s in W}
    gone = [s for s in R if id(s) not in w_ids]
    if gone:
        return Verdict(Code.TXN104, Reason.SCOPE_ENDED, gone[-1])
    # the lock is held at the read and at the write; released before an outer commit?
    W = list(stack)
    lock = R[0]
    outer_txn = [s for s in W[:W.index(lock)] if s.kind == "txn"]
    if outer_txn:
        return Verdict(Code.TXN104, Reason.LOCK_BEFORE_COMMIT, lock, outer_txn[-1])
    return None


def _fields(relevant: list) -> str:
    seen = []
    for m in relevant:
        if m.attr not in seen:
            seen.append(m.attr)
    return ", ".join(seen)


def _fw(ent: Entity, vocab: Vocab, scope: Optional[Scope] = None) -> str:
    if ent.framework:
        return ent.framework
    if scope is not None and scope.framework:
        return scope.framework
    for fw in ("django", "sqlalchemy", "ndb"):
        if fw in vocab.frameworks and len(vocab.frameworks - {"txnsafety"}) == 1:
            return fw
    return "generic"


def compose(verdict: Verdict, ent: Entity, w_line: int, verb: str, relevant: list, vocab: Vocab) -> str:
    """The message of a :class:`Verdict`: what was read where, how it was written, and the fix
    that fits the framework and the protection that was (not) there."""
    src = _source(ent)
    code, reason, scope = verdict.code.value, verdict.reason, verdict.scope
    if reason is Reason.HALF_PROTECTED:
        return _compose_half_protected(ent, src, w_line, verb, scope, vocab)
    if reason is Reason.NO_LOCK:
        return _compose_no_lock(code, ent, src, w_line, verb, relevant, scope, vocab)
    if reason is Reason.NO_TXN:
        return _compose_no_txn(code, ent, src, w_line, verb, relevant, scope, vocab)
    if reason is Reason.UNPROTECTED:
        return _compose_unprotected(code, ent, src, w_line, verb, relevant, vocab)
    if reason is Reason.WEAK_ISOLATION:
        return _compose_weak_isolation(code, ent, src, w_line, verb, relevant, scope, vocab)
    return _compose_scope_changed(ent, src, w_line, verb, verdict)


def _source(ent: Entity) -> str:
    """Where the entity's values came from, as the message says it."""
    if ent.source == "param":
        return "came in as a parameter"
    if ent.source == "call" and ent.via:
        return f"read by {ent.via} at line {ent.read_line}"
    if ent.source == "self":
        return f"read by the caller of {ent.via}"
    return f"read at line {ent.read_line}"


def _compose_half_protected(ent: Entity, src: str, w_line: int, verb: str, scope: Scope,
                            vocab: Vocab) -> str:
    name = ent.name
    fw = _fw(ent, vocab, scope)
    if scope.kind == "lock":
        fix = (f"re-read it under the lock: `with fetch_under_lock({name}) as {name}:` "
               f"(or a fresh get inside the block)")
    elif fw == "django":
        fix = "move the read inside the block and lock the row with select_for_update()"
    elif fw == "sqlalchemy":
        fix = "move the read inside the block and lock the row with with_for_update()"
    elif fw == "ndb":
        fix = "move the get inside the transaction"
    else:
        fix = "move the read inside the transaction or lock"
    where = "outside any transaction or lock" if ent.source != "param" else \
        "(read by the caller, outside it)"
    if ent.policy in LOCK_POLICIES and ent.source != "param":
        where = "outside any lock"
    elif ent.policy in TXN_POLICIES and ent.source != "param" and \
            any(s.kind == "lock" for s in ent.scopes):
        model = f"`{ent.model}`" if ent.model else "its model"
        where = f"under a lock but outside any transaction ({model} is declared @{ent.policy})"
    return (f"TXN101 half-protected: `{name}` {src} {where}, {verb} at line {w_line} inside "
            f"`{scope.label}` (line {scope.line}); {fix}")


def _compose_unprotected(code: str, ent: Entity, src: str, w_line: int, verb: str, relevant: list,
                         vocab: Vocab) -> str:
    fw = _fw(ent, vocab)
    if code == "TXN106":
        attr, mline = _counter_change(relevant)
        return (f"TXN106 lost-update counter: `{ent.name}.{attr}` changed in Python at line {mline} "
                f"from the value {src} and {verb} at line {w_line} with no transaction or lock; "
                f"{_counter_fix(fw, attr)}")
    fix = {"django": "do the read and the save in transaction.atomic() with select_for_update(), "
                     "or save(update_fields=[...]) of values that do not come from the read",
           "sqlalchemy": "read it with with_for_update() and commit before anyone else can, or "
                         "add a version_id_col",
           "ndb": "do the get and the put in one @ndb.transactional function"}.get(
        fw, "hold user_write_lock() (or a transaction with a row lock) around the read and the write")
    return (f"TXN102 unprotected: `{ent.name}` {src}, changed ({_fields(relevant)}) and {verb} at "
            f"line {w_line} with no transaction or lock; {fix}")


def _compose_scope_changed(ent: Entity, src: str, w_line: int, verb: str, verdict: Verdict) -> str:
    name = ent.name
    if verdict.reason is Reason.LOCK_RELEASED:
        return (f"TXN104 scope-changed: `{name}` read FOR UPDATE at line {ent.read_line}, but the row "
                f"lock ended with the commit at line {verdict.line} before it was {verb} at line {w_line}; "
                f"keep the read and the write in one transaction")
    if verdict.reason is Reason.SCOPE_ENDED:
        scope = verdict.scope
        return (f"TXN104 scope-changed: `{name}` {src} inside `{scope.label}` ({scope.where}line "
                f"{scope.line}) but {verb} at line {w_line} after it ended; do the read and the "
                f"write inside the same transaction or lock")
    lock, txn = verdict.scope, verdict.outer
    return (f"TXN104 scope-changed: `{name}` {src} and {verb} at line {w_line} under `{lock.label}` "
            f"(line {lock.line}), but the lock is released before `{txn.label}` (line {txn.line}) "
            f"commits, so the next holder can read the old row; take the lock outside the "
            f"transaction or use a transaction-level lock (select_for_update, "
            f"pg_advisory_xact_lock)")


def _compose_weak_isolation(code: str, ent: Entity, src: str, w_line: int, verb: str, relevant: list,
                            scope: Scope, vocab: Vocab) -> str:
    fw = _fw(ent, vocab, scope)
    iso = "READ COMMITTED"
    if code == "TXN106":
        attr, mline = _counter_change(relevant)
        return (f"TXN106 lost-update counter: `{ent.name}.{attr}` changed in Python at line {mline} "
                f"from the value {src} and {verb} at line {w_line} inside `{scope.label}` "
                f"(line {scope.line}), which at {iso} does not lock the row; "
                f"{_counter_fix(fw, attr)}")
    lock = "with_for_update()" if fw == "sqlalchemy" else "select_for_update()"
    return (f"TXN109 weak isolation: `{ent.name}` {src}, changed ({_fields(relevant)}) and {verb} at "
            f"line {w_line} inside `{scope.label}` (line {scope.line}) at {iso} with no row lock "
            f"or version check; read it with {lock} or add a version column")


def _compose_no_lock(code: str, ent: Entity, src: str, w_line: int, verb: str, relevant: list,
                     txn: Optional[Scope], vocab: Vocab) -> str:
    """TXN102/TXN106 for a model that only a lock protects, written without one."""
    model = f"`{ent.model}`" if ent.model else "its model"
    why = f"without the user write lock ({model} is declared @{ent.policy}"
    if txn is not None:
        why += f", so `{txn.label}` (line {txn.line}) does not protect it"
    why += ")"
    fix = (f"hold user_write_lock() around the read and the write, or re-read it under the lock "
           f"with `with fetch_under_lock({ent.name}) as {ent.name}:`")
    if code == "TXN106":
        attr, mline = _counter_change(relevant)
        fw = _fw(ent, vocab, txn)
        atomic = _counter_fix(fw, attr) if fw in ("django", "sqlalchemy") else \
            "update it atomically in the database"
        return (f"TXN106 lost-update counter: `{ent.name}.{attr}` changed in Python at line {mline} "
                f"from the value {src} and {verb} at line {w_line} {why}; {fix}, or {atomic}")
    return (f"TXN102 unprotected: `{ent.name}` {src}, changed ({_fields(relevant)}) and {verb} at "
            f"line {w_line} {why}; {fix}")


def _compose_no_txn(code: str, ent: Entity, src: str, w_line: int, verb: str, relevant: list,
                    lock: Scope, vocab: Vocab) -> str:
    """TXN102/TXN106 for a model that only a transaction protects, written under a user lock
    but outside any transaction (the lock is named: it is why the code looked safe)."""
    model = f"`{ent.model}`" if ent.model else "its model"
    why = (f"outside any transaction ({model} is declared @{ent.policy}, so `{lock.label}` "
           f"(line {lock.line}) does not protect it)")
    fw = _fw(ent, vocab)
    lock_row = "with_for_update()" if fw == "sqlalchemy" else "select_for_update()"
    fix = f"do the read and the write in one transaction and read the row with {lock_row}"
    if code == "TXN106":
        attr, mline = _counter_change(relevant)
        return (f"TXN106 lost-update counter: `{ent.name}.{attr}` changed in Python at line {mline} "
                f"from the value {src} and {verb} at line {w_line} {why}; {fix}, or "
                f"{_counter_fix(fw, attr)}")
    return (f"TXN102 unprotected: `{ent.name}` {src}, changed ({_fields(relevant)}) and {verb} at "
            f"line {w_line} {why}; {fix}")


def _counter_change(relevant: list) -> tuple[str, int]:
    """(attribute, line) of the counter change among ``relevant`` (TXN106 has one)."""
    change = next(m for m in relevant if m.kind == "counter")
    return change.attr, change.line


def _counter_fix(fw: str, attr: str) -> str:
    if fw == "django":
        return f"update it atomically with F('{attr}') (`.update({attr}=F('{attr}') + n)`)"
    if fw == "sqlalchemy":
        return f"update it atomically with `Model.{attr} + n` (update(Model).values(...))"
    if fw == "ndb":
        return "do the get and the put in one @ndb.transactional function"
    return (f"update it atomically in the database (F('{attr}') + n / Model.{attr} + n) or hold a "
            f"lock around the read and the write")


def on_write(fa: "FunctionState", event: Written) -> None:
    """The verdict on a write of changes that matter (subscribed to ``WRITE``).

    A parameter written with no protection taken here is its callers' business (the walk
    keeps it as a summary); an unprotected helper is also fine when every caller protects
    it, so TXN102 and TXN106 are deferred to the callers.  Confidence is ``low`` for a stale
    copy with nothing derived (all changes blind), and for a partial write (``update_fields``,
    a SQLAlchemy flush) of values made only from *other* columns of the read."""
    ent = event.entity
    if ent.source == "param" and not event.scopes:
        return
    relevant = list(event.changes)
    verdict = judge(ent, event.scopes, relevant, fa.vocab)
    if verdict is None:
        return
    code = verdict.code
    msg = compose(verdict, ent, event.line, event.verb, relevant, fa.vocab)
    col = fa.col(event.node) if event.at_node else 0
    blind = all(m.kind == "blind" for m in relevant)
    other_columns = event.how in ("fields", "flush") and \
        all(m.kind == "derived" and not m.own for m in relevant)
    fa.reported_write_lines.add(event.line)
    if not (blind or other_columns):
        fa.sure_write_lines.add(event.line)
    fa.report(event.line, code, msg, col=col, deferrable=code in (Code.TXN102, Code.TXN106)
              and ent.source != "param", need=protection_needed(ent.policy),
              confidence=Confidence.LOW if blind or other_columns else Confidence.HIGH,
              assessment=severity.of_write(ent, relevant))


def on_call_resolved(fa: "FunctionState", event: CallResolved) -> None:
    """A callee that writes a row its caller read and handed it (``save_points(wallet)``):
    the caller's read and the callee's write, judged at the call (subscribed to
    ``CALL_RESOLVED``; ``fa`` is the caller)."""
    site, callee = event.site, event.callee
    order = callee.call_order()
    pairs = list(site.args)
    if site.receiver is not None and "self" in callee.param_writes:
        pairs.append(("self", site.receiver))
    for key, ent in pairs:
        pname = key if isinstance(key, str) else (order[key] if key < len(order) else None)
        if pname is None or pname not in callee.param_writes or ent.source == "param" or \
                not reaches(callee, pname, site.passed):
            continue            # ``generate_slug()`` saves only ``if commit:``
        w_line, relevant, _kind = callee.param_writes[pname]
        verdict = judge(ent, site.stack, relevant, fa.vocab)
        if verdict is None:
            continue
        where = "line" if callee.mod is fa.mod else \
            f"{os.path.basename(callee.mod.filename) or 'another module'} line"
        verb = f"written by `{callee.name}()` ({where} {w_line}) called"
        msg = compose(verdict, ent, site.line, verb, relevant, fa.vocab)
        if fa.mod.cfg.code_enabled(verdict.code.value):
            blind = all(m.kind == "blind" for m in relevant)
            judged = severity.of_write(ent, relevant)
            fa.mod.add(Finding(site.line, site.col, verdict.code.value, msg,
                               confidence=Confidence.LOW if blind else Confidence.HIGH,
                               severity=judged.severity, severity_reason=judged.reason))
