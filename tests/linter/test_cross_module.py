"""The standalone command follows calls between modules of the project."""
from __future__ import annotations

import textwrap

from txnsafety_lint.cli import main

HELPERS = textwrap.dedent("""\
    from shop.models import Profile


    def add_coins(wallet, n):
        wallet.coins = wallet.coins + n
        wallet.save()


    def bump_visits(uid):
        profile = Profile.objects.get(user_id=uid)
        profile.visits += 1
        profile.save()
    """)
VIEWS = textwrap.dedent("""\
    from shop.models import Wallet
    from txnsafety.locks import user_write_lock

    from .helpers import add_coins
    from app.helpers import bump_visits


    def reward(uid):
        wallet = Wallet.objects.get(user_id=uid)
        with user_write_lock(uid):
            add_coins(wallet, 5)
            bump_visits(uid)
    """)


def make(tmp_path):
    pkg = tmp_path / "app"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "helpers.py").write_text(HELPERS)
    (pkg / "views.py").write_text(VIEWS)
    return tmp_path


def test_calls_followed_between_modules(tmp_path, capsys):
    root = make(tmp_path)
    assert main([str(root)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1, out
    assert "views.py:11:" in out[0] and "TXN101" in out[0]
    assert "written by `add_coins()` (helpers.py line 6)" in out[0]


def test_one_file_at_a_time(tmp_path, capsys):
    root = make(tmp_path)
    # the helper's counter is a user's own statistic (severity low): shown when asked for
    assert main([str(root), "--no-cross-module", "--min-severity", "low"]) == 1
    out = capsys.readouterr().out
    assert "helpers.py:12:" in out and "TXN106" in out      # helper judged on its own
    assert "views.py" not in out


def test_module_alias_chain_three_calls_down(tmp_path, capsys):
    """views.internal -> services.award_bonus -> _apply_bonus -> _credit (the demo app's shape)."""
    pkg = tmp_path / "shop"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "services.py").write_text(textwrap.dedent("""\
        from .models import Account


        def award_bonus(pk, amount):
            _apply_bonus(pk, amount)


        def _apply_bonus(pk, amount):
            _credit(pk, amount)


        def _credit(pk, amount):
            account = Account.objects.select_for_update().get(pk=pk)
            account.balance += amount
            account.save()
        """))
    (pkg / "views.py").write_text(textwrap.dedent("""\
        from django.db import transaction

        from . import services
        from .models import Account


        def internal(pk):
            with transaction.atomic():
                account = Account.objects.select_for_update().get(pk=pk)
                account.balance += 10
                services.award_bonus(pk, 5)
                account.save()


        def internal_safe(pk):
            with transaction.atomic():
                services.award_bonus(pk, 5)
                account = Account.objects.select_for_update().get(pk=pk)
                account.balance += 10
                account.save()
        """))
    assert main([str(tmp_path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1, out                   # no TXN108 in _credit: every chain is in atomic()
    assert "views.py:12:" in out[0] and "TXN103" in out[0] and "services.py lines 13/15" in out[0]


def test_a_wrapper_of_a_wrapper_in_another_module_is_a_transaction(tmp_path, capsys):
    """``views`` enters ``audit.audited()``, a context manager around ``db.in_txn()``, itself
    around ``transaction.atomic()``: the locking read is inside a transaction, from the index
    (the facts of each file, joined to a fixed point) as from a fresh run."""
    pkg = tmp_path / "app"
    pkg.mkdir()
    (tmp_path / "pyproject.toml").write_text("[tool.txnsafety]\n")
    (pkg / "__init__.py").write_text("")
    (pkg / "db.py").write_text(textwrap.dedent("""\
        import contextlib
        from django.db import transaction


        @contextlib.contextmanager
        def in_txn():
            with transaction.atomic():
                yield
        """))
    (pkg / "audit.py").write_text(textwrap.dedent("""\
        import contextlib
        from .db import in_txn


        @contextlib.contextmanager
        def audited(what):
            with in_txn():
                yield what
        """))
    views = textwrap.dedent("""\
        from shop.models import Account
        from .audit import audited


        def pay(pk):
            with {wrapper}("pay"):
                account = Account.objects.select_for_update().get(pk=pk)
                account.balance -= 1
                account.save()
        """)
    (pkg / "views.py").write_text(views.format(wrapper="audited"))
    for args in (["--no-cache"], [], []):           # fresh, cold index, warm index
        assert main([str(tmp_path), *args]) == 0, capsys.readouterr().out
    (pkg / "views.py").write_text(views.format(wrapper="open"))    # not a transaction
    assert main([str(tmp_path)]) == 1
    assert "views.py:7:" in capsys.readouterr().out


def test_the_projects_own_commit_once_wrapper_never_retries(tmp_path, capsys):
    """``@transactional`` of the project (a decorator that commits after the call, named
    like App Engine's retrying runner) is a unit of work that runs once: a message queued
    inside it is not sent again by a retry (no TXN107), as a configured retrying runner's is."""
    pkg = tmp_path / "app"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "db.py").write_text(textwrap.dedent("""\
        def transactional(function):
            def wrapper(*args, **kwargs):
                try:
                    result = function(*args, **kwargs)
                    store.commit()
                    return result
                except Exception:
                    store.abort()
                    raise
            return wrapper
        """))
    (pkg / "runner.py").write_text(textwrap.dedent("""\
        from .db import transactional
        from .models import Message


        @transactional
        def deliver(store, msg_id):
            message = store.query(Message).filter_by(id=msg_id).one()
            message.hops = message.hops + 1
            queue.enqueue(message)
        """))
    (tmp_path / "pyproject.toml").write_text('[tool.txnsafety]\nmin-severity = "low"\n')
    main([str(tmp_path), "--no-cache", "--exit-zero"])
    assert "TXN107" not in capsys.readouterr().out
    (tmp_path / "pyproject.toml").write_text(
        '[tool.txnsafety]\nmin-severity = "low"\nretrying_transactions = ["transactional"]\n')
    main([str(tmp_path), "--no-cache", "--exit-zero"])
    assert "runner.py:9:5: TXN107" in capsys.readouterr().out
