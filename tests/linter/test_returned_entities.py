"""An entity loaded by a helper and returned to its caller is tracked in the caller.

The caller's read is the call: the helper's own transaction or lock (if any) ends when it
returns, so a write under the caller's transaction is half-protected (TXN101) when the
helper read with no protection, and scope-changed (TXN104) when it read under its own.
"""
from __future__ import annotations

import textwrap

from txnsafety_lint.analysis import analyze_source
from txnsafety_lint.cli import main

SQLA_HEAD = "from sqlalchemy.orm import Session\nfrom app.models import Wallet\n\n\n"
DJANGO_HEAD = ("from django.db import transaction\nfrom shop.models import Wallet\n"
               "from txnsafety.locks import user_write_lock\n\n\n")


def found(body, head=SQLA_HEAD, **cfg):
    from txnsafety_lint.facts.config import Config
    src = head + textwrap.dedent(body)
    findings = analyze_source(src, Config().update(cfg) if cfg else Config())
    return [(f.line - head.count("\n"), f.code, f.message) for f in findings]


def codes(body, head=SQLA_HEAD, **cfg):
    return [(line, code) for line, code, _m in found(body, head, **cfg)]


def test_helper_session_get_then_write_in_transaction_is_txn101():
    got = found("""
        def current_wallet(factory, uid):
            with factory(expire_on_commit=False) as session:
                return session.get(Wallet, uid)


        def earn(factory, uid):
            wallet = current_wallet(factory, uid)
            with factory.begin() as session:
                session.add(wallet)
                wallet.points += 1
        """)
    assert [(line, code) for line, code, _m in got] == [(9, "TXN101")]
    msg = got[0][2]
    offset = SQLA_HEAD.count("\n")
    assert f"read by `current_wallet()` (line {4 + offset}) at line {8 + offset}" in msg
    assert "with_for_update()" in msg


def test_re_read_for_update_inside_is_clean():
    assert codes("""
        def current_wallet(factory, uid):
            with factory(expire_on_commit=False) as session:
                return session.get(Wallet, uid)


        def earn(factory, uid):
            with factory.begin() as session:
                wallet = session.get(Wallet, uid, with_for_update=True)
                wallet.points += 1
        """) == []


def test_helper_returning_a_variable_django():
    assert codes("""
        def load_wallet(uid):
            wallet = Wallet.objects.get(user_id=uid)
            return wallet


        def earn(uid):
            wallet = load_wallet(uid)
            with transaction.atomic():
                wallet.points = wallet.points + 1
                wallet.save()
        """, head=DJANGO_HEAD) == [(11, "TXN101")]


def test_helper_read_under_its_own_lock_is_txn104():
    got = found("""
        def locked_wallet(uid):
            with user_write_lock(uid):
                return Wallet.objects.get(user_id=uid)


        def earn(uid):
            wallet = locked_wallet(uid)
            with user_write_lock(uid):
                wallet.points = wallet.points + 1
                wallet.save()
        """, head=DJANGO_HEAD)
    assert [(line, code) for line, code, _m in got] == [(11, "TXN104")]
    assert "in `locked_wallet()`" in got[0][2]


def test_helper_called_inside_the_callers_protection_is_clean():
    assert codes("""
        def load_wallet(uid):
            return Wallet.objects.select_for_update().get(user_id=uid)


        def earn(uid):
            with transaction.atomic():
                wallet = load_wallet(uid)
                wallet.points += 1
                wallet.save()


        def earn_locked(uid):
            with user_write_lock(uid):
                wallet = Wallet.objects.get(user_id=uid)
                wallet.points += 1
                wallet.save()
        """, head=DJANGO_HEAD) == []


def test_unprotected_write_of_a_returned_entity():
    assert codes("""
        def load_wallet(uid):
            return Wallet.objects.get(user_id=uid)


        def rename(uid, name):
            wallet = load_wallet(uid)
            wallet.owner = name
            wallet.save()
        """, head=DJANGO_HEAD) == [(9, "TXN102")]


def test_helper_that_returns_its_parameter_is_not_a_loader():
    assert codes("""
        def same(wallet):
            wallet.touched = True
            return wallet


        def earn(uid, wallet):
            wallet = same(wallet)
            with transaction.atomic():
                wallet.points = 1
                wallet.save()
        """, head=DJANGO_HEAD) == []


def test_recursive_helper_does_not_loop():
    assert codes("""
        def load(uid, depth=0):
            if depth:
                return load(uid, depth - 1)
            return Wallet.objects.get(user_id=uid)


        def earn(uid):
            wallet = load(uid)
            with transaction.atomic():
                wallet.points += 1
                wallet.save()
        """, head=DJANGO_HEAD) == [(12, "TXN101")]


def test_helper_of_another_module(tmp_path, capsys):
    pkg = tmp_path / "app"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "auth.py").write_text(textwrap.dedent("""\
        from shop.models import Wallet


        def current_wallet(request):
            return Wallet.objects.get(user_id=request.user.id)
        """))
    (pkg / "views.py").write_text(textwrap.dedent("""\
        from django.db import transaction

        from .auth import current_wallet
        from . import auth


        def earn(request):
            wallet = current_wallet(request)
            with transaction.atomic():
                wallet.points += 1
                wallet.save()


        def earn_again(request):
            wallet = auth.current_wallet(request)
            with transaction.atomic():
                wallet.points += 1
                wallet.save()
        """))
    assert main([str(tmp_path)]) == 1
    out = [line for line in capsys.readouterr().out.splitlines() if line]
    assert len(out) == 2, out
    assert "views.py:11:" in out[0] and "TXN101" in out[0]
    assert "read by `current_wallet()` (auth.py line 5) at line 8" in out[0]
    assert "views.py:18:" in out[1] and "TXN101" in out[1]
    capsys.readouterr()
    assert main([str(tmp_path), "--no-cross-module"]) == 0       # the helper is not followed
