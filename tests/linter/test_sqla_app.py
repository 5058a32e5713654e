"""The SQLAlchemy example app (fixtures/sqla_app): the safe twins are not reported.

Each scenario function holds its unsafe variant and its safe twins side by side (the
analysis is flow-insensitive, so a function is reported when one variant is racy).  The
version-column twins (``Doc``, ``VersionedCounter`` from models.py) and the atomic
twins must never be the reported entity.  ``Tally`` is declared
``@dangerously_written_outside_transaction`` in models.py: only TXN103 may name it.
"""
from __future__ import annotations

import ast

from txnsafety_lint.cli import main

from .helpers import ROOT

APP = ROOT / "fixtures" / "sqla_app"

#: (file, function) -> [(code, entity named in the message)]
EXPECTED = {
    ("asgi_app.py", "internal"): [("TXN103", "tally")],      # AsyncStack(..., async_sessionmaker(...))
    ("asgi_app.py", "unprotected"): [("TXN106", "acct.balance")],
    ("asgi_app.py", "scope_changed"): [("TXN106", "acct.balance")],
    ("asgi_app.py", "weak_isolation"): [("TXN106", "acct.balance")],
    ("asgi_app.py", "versioned"): [("TXN106", "acct.balance")],
    ("counters.py", "increment"): [("TXN106", "counter.n")],
    ("scenarios.py", "internal"): [("TXN103", "tally")],     # stack.Auto(): a sessionmaker field
    ("scenarios.py", "unprotected"): [("TXN106", "acct.balance")],
    ("scenarios.py", "scope_changed"): [("TXN106", "acct.balance")],
    ("scenarios.py", "weak_isolation"): [("TXN106", "acct.balance")],
    ("scenarios.py", "versioned"): [("TXN106", "acct.balance")],
}


def owner(path, line):
    tree = ast.parse((APP / path).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                node.lineno <= line <= node.end_lineno:
            return node.name
    return "<module>"


def test_only_the_unsafe_variants_are_reported(capsys):
    main([str(APP), "--include-tests"])   # fixtures/ is quiet by default
    got: dict = {}
    for text in capsys.readouterr().out.splitlines():
        path, line, _col, rest = text.split(":", 3)
        name = path.rsplit("/", 1)[-1]
        code = rest.split()[0]
        entity = rest.split("`")[1]
        got.setdefault((name, owner(name, int(line))), []).append((code, entity))
    assert got == EXPECTED


def test_version_column_twins_are_never_named(capsys):
    main([str(APP), "--include-tests"])   # fixtures/ is quiet by default
    out = capsys.readouterr().out
    assert "`doc." not in out and "`vcounter" not in out


def test_a_dangerously_written_model_gets_only_txn103(capsys):
    """``tally.n += 10`` outside any transaction is what the policy declares: no TXN106."""
    main([str(APP), "--include-tests"])   # fixtures/ is quiet by default
    for line in capsys.readouterr().out.splitlines():
        if "`tally" in line or "`again" in line:
            assert " TXN103 " in line, line
