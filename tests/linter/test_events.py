"""The walk emits typed events and the rules decide on them (events.py, rules/subscriptions.py).

One function that takes a transaction, reads a row with a row lock, bumps a counter, saves,
checks then inserts, sends an e-mail, leaves the transaction and saves the row again: its
events, in statement order, with the protection held at each; and the verdict at the last
save is the read-modify-write rule's, reached only through its subscription.
"""
from __future__ import annotations

import ast
import textwrap

from txnsafety_lint.analysis import ModuleAnalyzer, Prefilter
from txnsafety_lint.facts.config import Config
from txnsafety_lint.flow.events import EventKind, LockedRead, Written
from txnsafety_lint.rules import read_modify_write, subscriptions

SOURCE = textwrap.dedent("""\
    from django.core.mail import send_mail
    from django.db import transaction
    from shop.models import Account, Ledger


    def bump(pk):
        with transaction.atomic():
            account = Account.objects.select_for_update().get(pk=pk)
            account.balance += 1
            account.save()
            if not Ledger.objects.filter(account=account).exists():
                Ledger.objects.create(account=account)
            send_mail("bumped", "", "a@b", ["c@d"])
        account.seen = True
        account.save()
    """)

K = EventKind
EXPECTED = [
    (7, K.PROTECTION_ENTERED, 1), (8, K.FOR_UPDATE_READ, 1), (8, K.READ, 1), (9, K.MUTATION, 1),
    (10, K.CALL, 1), (10, K.STORE, 1), (10, K.WRITE, 1), (10, K.ACT, 1),
    (11, K.CALL, 1), (11, K.CALL, 1), (11, K.CHECK, 1), (12, K.CALL, 1), (12, K.ACT, 1),
    (13, K.SIDE_EFFECT, 1), (13, K.CALL, 1),
    (7, K.PROTECTION_LEFT, 0), (14, K.MUTATION, 0), (15, K.CALL, 0), (15, K.STORE, 0), (15, K.WRITE, 0),
    (15, K.ACT, 0), (6, K.FUNCTION_END, 0),
]


def _walk(source: str = SOURCE) -> tuple[ModuleAnalyzer, list]:
    """The module's analyser and its findings."""
    cfg = Config()
    m = ModuleAnalyzer(source, ast.parse(source), cfg, "views.py", Prefilter(cfg), subscriptions.RULES)
    return m, m.run()


def test_the_walk_emits_each_event_in_statement_order_with_the_protection_held():
    fa = _walk()[0].functions["bump"]
    assert [(e.line, e.kind, len(e.scopes)) for e in fa.events] == EXPECTED
    locked = next(e for e in fa.events if isinstance(e, LockedRead))
    assert locked.transaction is not None and locked.transaction.label.startswith("transaction.atomic")
    last = [e for e in fa.events if isinstance(e, Written)][-1]
    assert last.entity.name == "account" and [m.attr for m in last.changes] == ["seen"]
    assert last.scopes == ()


def test_a_verdict_comes_from_the_rule_subscribed_to_the_event(monkeypatch):
    assert [(f.line, f.code) for f in _walk()[1]] == [(15, "TXN104")]   # saved after the commit
    # without its subscription the read-modify-write rule never sees the write
    others = tuple(h for h in subscriptions.SUBSCRIPTIONS[K.WRITE] if h is not read_modify_write.on_write)
    monkeypatch.setitem(subscriptions.SUBSCRIPTIONS, K.WRITE, others)
    assert _walk()[1] == []


def test_the_walk_alone_reports_nothing():
    """Handed no rules, the walk records the same events and decides nothing."""
    cfg = Config()
    m = ModuleAnalyzer(SOURCE, ast.parse(SOURCE), cfg, "views.py", Prefilter(cfg))
    assert m.run() == []
    assert [(e.line, e.kind, len(e.scopes)) for e in m.functions["bump"].events] == EXPECTED
