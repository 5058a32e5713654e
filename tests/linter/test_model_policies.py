"""Model policies: the linter reads txnsafety's class decorators and applies them.

``@dangerously_written_outside_transaction*`` leaves only TXN103 (and TXN105 for a check
followed by an insert); ``@versioned`` is a version column; ``@written_with_user_lock``
is protected by the lock alone, as the runtime checker judges it.  Declarations are read
in the module and, under ``txnsafety lint``, through imports (as versioned models are).
"""
from __future__ import annotations

import textwrap

import pytest

from txnsafety_lint.analysis import analyze_source
from txnsafety_lint.cli import main
from txnsafety_lint.facts.config import Config


def codes(src, **cfg):
    config = Config().update(cfg) if cfg else Config()
    return [(f.line, f.code) for f in analyze_source(textwrap.dedent(src), config)]


DJANGO = """\
    from django.db import models, transaction

    import txnsafety
    from txnsafety.locks import user_write_lock

    {decorator}
    class Item(models.Model):
        n = models.IntegerField(default=0)

    """

LEGACY = "@txnsafety.dangerously_written_outside_transaction(reason=\"legacy\")"
LEGACY_OR_LOCK = "@txnsafety.dangerously_written_outside_transaction_or_user_lock(reason=\"legacy\")"
USER_LOCK = "@txnsafety.written_with_user_lock(lambda m: m.user_id)"


def django(decorator, body):
    return textwrap.dedent(DJANGO).format(decorator=decorator) + textwrap.dedent(body)


#: what each shape earns on a model without a policy (line within the body, code)
SHAPES = {
    "TXN102": ("""\
        def f(pk, s):
            m = Item.objects.get(pk=pk)
            m.s = m.s + "!"
            m.save()
        """, 4),
    "TXN106": ("""\
        def f(pk):
            m = Item.objects.get(pk=pk)
            m.n += 1
            m.save()
        """, 4),
    "TXN101": ("""\
        def f(pk):
            m = Item.objects.get(pk=pk)
            with transaction.atomic():
                m.n = 5 - m.n
                m.save()
        """, 5),
    "TXN104": ("""\
        def f(pk):
            with transaction.atomic():
                m = Item.objects.select_for_update().get(pk=pk)
            m.n = 5 - m.n
            m.save()
        """, 5),
    "TXN109": ("""\
        def f(pk, s):
            with transaction.atomic():
                m = Item.objects.get(pk=pk)
                m.s = m.s + "!"
                m.save()
        """, 5),
}
HEAD_LINES = textwrap.dedent(DJANGO).count("\n")


@pytest.mark.parametrize("code", sorted(SHAPES))
def test_shape_is_reported_without_a_policy(code):
    body, line = SHAPES[code]
    assert codes(django("", body), enable=["TXN109"]) == [(HEAD_LINES + line, code)]


@pytest.mark.parametrize("decorator", [LEGACY, LEGACY_OR_LOCK], ids=["legacy", "legacy_or_lock"])
@pytest.mark.parametrize("code", sorted(SHAPES))
def test_dangerously_written_models_get_no_protection_codes(decorator, code):
    body, _line = SHAPES[code]
    assert codes(django(decorator, body), enable=["TXN109"]) == []


@pytest.mark.parametrize("decorator", [LEGACY, LEGACY_OR_LOCK], ids=["legacy", "legacy_or_lock"])
def test_dangerously_written_models_still_get_txn103(decorator):
    src = django(decorator, """\
        def f(pk):
            a = Item.objects.get(pk=pk)
            b = Item.objects.get(pk=pk)
            b.n += 1
            b.save()
            a.n += 2
            a.save()
        """)
    assert codes(src) == [(HEAD_LINES + 7, "TXN103")]


def test_dangerously_written_txn103_through_a_helper():
    src = django(LEGACY, """\
        def bonus(pk):
            again = Item.objects.get(pk=pk)
            again.n += 5
            again.save()


        def f(pk):
            m = Item.objects.get(pk=pk)
            bonus(pk)
            m.n += 10
            m.save()
        """)
    assert codes(src) == [(HEAD_LINES + 11, "TXN103")]


def test_dangerously_written_check_then_insert_is_still_txn105():
    src = django(LEGACY, """\
        def f(name):
            if not Item.objects.filter(name=name).exists():
                Item.objects.create(name=name)
        """)
    assert codes(src) == [(HEAD_LINES + 3, "TXN105")]


def test_dangerously_written_limit_check_on_its_own_row_is_accepted():
    body = """\
        def f(pk):
            m = Item.objects.get(pk=pk)
            if m.n >= 10:
                return
            m.n += 1
            m.save()
        """
    assert codes(django("", body)) == [(HEAD_LINES + 6, "TXN106")]
    assert codes(django(LEGACY, body)) == []


def test_dangerously_written_limit_check_then_another_write_is_txn105():
    src = django(LEGACY, """\
        def f(pk, other):
            m = Item.objects.get(pk=pk)
            if m.n >= 10:
                return
            Item.objects.filter(pk=other).update(n=5)
        """)
    assert codes(src) == [(HEAD_LINES + 5, "TXN105")]


def test_policy_is_inherited_and_overridden():
    src = textwrap.dedent(DJANGO).format(decorator=LEGACY) + textwrap.dedent("""\
        class Child(Item):
            pass


        @txnsafety.written_in_transaction()
        class Strict(Item):
            pass


        def child(pk):
            c = Child.objects.get(pk=pk)
            c.n += 1
            c.save()


        def strict(pk):
            s = Strict.objects.get(pk=pk)
            s.n += 1
            s.save()
        """)
    assert codes(src) == [(HEAD_LINES + 19, "TXN106")]


def test_abstract_is_not_inherited_and_hides_the_base_policy():
    """As policy_of(): the nearest declaration decides, and @abstract() applies to its class only."""
    src = textwrap.dedent(DJANGO).format(decorator=LEGACY) + textwrap.dedent("""\
        @txnsafety.abstract()
        class Base(Item):
            pass


        class Concrete(Base):
            pass


        def f(pk):
            c = Concrete.objects.get(pk=pk)
            c.n += 1
            c.save()
        """)
    assert codes(src) == [(HEAD_LINES + 13, "TXN106")]


@pytest.mark.parametrize("imports, decorator", [
    ("import txnsafety", "@txnsafety.dangerously_written_outside_transaction(reason='x')"),
    ("import txnsafety as ts", "@ts.dangerously_written_outside_transaction(reason='x')"),
    ("import txnsafety.policies", "@txnsafety.policies.dangerously_written_outside_transaction(reason='x')"),
    ("from txnsafety import policies as p", "@p.dangerously_written_outside_transaction(reason='x')"),
    ("from txnsafety import dangerously_written_outside_transaction",
     "@dangerously_written_outside_transaction(reason='x')"),
    ("from txnsafety.policies import dangerously_written_outside_transaction as legacy",
     "@legacy(reason='x')"),
])
def test_spellings_of_the_decorator(imports, decorator):
    src = f"""\
        from django.db import models
        {imports}

        {decorator}
        class Item(models.Model):
            n = models.IntegerField(default=0)

        def f(pk):
            m = Item.objects.get(pk=pk)
            m.n += 1
            m.save()
        """
    assert codes(src) == []


@pytest.mark.parametrize("imports, decorator", [
    ("from mylib import dangerously_written_outside_transaction",
     "@dangerously_written_outside_transaction(reason='x')"),
    ("from mylib import versioned", "@versioned('version')"),
    ("import mylib as txnsafety_but_not", "@txnsafety_but_not.versioned('version')"),
    ("", "@versioned('version')"),
    ("import txnsafety", "@txnsafety.dangerously_written_outside_transaction"),
])
def test_other_decorators_are_not_policies(imports, decorator):
    src = f"""\
        from django.db import models
        {imports}

        {decorator}
        class Item(models.Model):
            n = models.IntegerField(default=0)

        def f(pk):
            m = Item.objects.get(pk=pk)
            m.n += 1
            m.save()
        """
    assert [c for _l, c in codes(src)] == ["TXN106"]


def test_versioned_decorator_is_a_version_column():
    src = django("@txnsafety.versioned('version')", SHAPES["TXN106"][0])
    assert codes(src) == []


def test_other_policies_change_nothing():
    for decorator in ("@txnsafety.written_in_transaction()",
                      "@txnsafety.written_in_transaction_or_user_lock(lambda m: m.user_id)",
                      "@txnsafety.written_by_single_writer('cron')",
                      "@txnsafety.written_once()", "@txnsafety.never_written()"):
        for code, (body, line) in SHAPES.items():
            assert codes(django(decorator, body), enable=["TXN109"]) == [(HEAD_LINES + line, code)], \
                (decorator, code)


# -- written_with_user_lock

def test_user_lock_model_in_a_locking_transaction_is_txn102():
    body = """\
        def f(pk, s):
            with transaction.atomic():
                m = Item.objects.select_for_update().get(pk=pk)
                m.s = m.s + "!"
                m.save()
        """
    assert codes(django("", body)) == []
    found = analyze_source(django(USER_LOCK, body))
    assert [(f.line, f.code) for f in found] == [(HEAD_LINES + 5, "TXN102")]
    msg = found[0].message
    assert "@written_with_user_lock" in msg and "`Item`" in msg
    assert "transaction.atomic()" in msg and "user_write_lock(" in msg


def test_user_lock_model_counter_in_a_transaction_is_txn106():
    found = analyze_source(django(USER_LOCK, SHAPES["TXN109"][0].replace(
        "m.s = m.s + \"!\"", "m.n += 1")))
    assert [(f.line, f.code) for f in found] == [(HEAD_LINES + 5, "TXN106")]
    assert "@written_with_user_lock" in found[0].message


@pytest.mark.parametrize("body, want", [
    ("""\
        def f(uid):
            with user_write_lock(uid):
                m = Item.objects.get(pk=uid)
                m.n += 1
                m.save()
        """, []),
    ("""\
        def f(uid):
            with transaction.atomic():
                with user_write_lock(uid):
                    m = Item.objects.get(pk=uid)
                    m.n += 1
                    m.save()
        """, [(6, "TXN104")]),                    # the lock ends before the commit
    ("""\
        def f(uid):
            m = Item.objects.get(pk=uid)
            with user_write_lock(uid):
                with transaction.atomic():
                    m.n += 1
                    m.save()
        """, [(6, "TXN101")]),
    ("""\
        def f(uid):
            with user_write_lock(uid):
                m = Item.objects.get(pk=uid)
            with transaction.atomic():
                m.n += 1
                m.save()
        """, [(6, "TXN104")]),
])
def test_user_lock_model_judged_by_its_lock(body, want):
    assert codes(django(USER_LOCK, body)) == [(HEAD_LINES + line, code) for line, code in want]


def test_user_lock_helper_called_under_the_lock_is_not_reported():
    helper = """\
        def bump(uid):
            with transaction.atomic():
                m = Item.objects.select_for_update().get(pk=uid)
                m.n += 1
                m.save()


        def view(uid):
            with {outer}:
                bump(uid)
        """
    assert codes(django(USER_LOCK, helper.format(outer="user_write_lock(uid)"))) == []
    # a caller's transaction is no lock: the helper is reported
    assert codes(django(USER_LOCK, helper.format(outer="transaction.atomic()"))) == [
        (HEAD_LINES + 5, "TXN106")]


def test_user_lock_model_written_by_a_helper_under_a_transaction():
    src = django(USER_LOCK, """\
        def add(m, n):
            m.n = m.n + n
            m.save()


        def view(uid):
            with transaction.atomic():
                m = Item.objects.select_for_update().get(pk=uid)
                add(m, 5)
        """)
    assert [c for _l, c in codes(src)] == ["TXN106"]


# -- written_in_transaction: only a transaction protects it (a user lock does not)

IN_TXN = "@txnsafety.written_in_transaction()"
TXN_OR_LOCK = "@txnsafety.written_in_transaction_or_user_lock(lambda m: m.user_id)"


@pytest.mark.parametrize("body, want", [
    ("""\
        def f(uid):
            with user_write_lock(uid):
                m = Item.objects.get(pk=uid)
                m.n += 1
                m.save()
        """, [(5, "TXN106")]),                    # runtime: TXN102 (no transaction at all)
    ("""\
        def f(uid):
            with user_write_lock(uid):
                m = Item.objects.get(pk=uid)
                m.s = m.s + "!"
                m.save()
        """, [(5, "TXN102")]),
    ("""\
        def f(uid):
            with user_write_lock(uid):
                m = Item.objects.get(pk=uid)
                with transaction.atomic():
                    m.n = 5 - m.n
                    m.save()
        """, [(6, "TXN101")]),                    # runtime: read outside any transaction
    ("""\
        def f(uid):
            with user_write_lock(uid):
                with transaction.atomic():
                    m = Item.objects.select_for_update().get(pk=uid)
                    m.n += 1
                    m.save()
        """, []),
    ("""\
        def f(uid):
            with transaction.atomic():
                with user_write_lock(uid):
                    m = Item.objects.select_for_update().get(pk=uid)
                    m.n += 1
                    m.save()
        """, []),                                 # the row lock lasts until the commit
])
def test_transaction_model_is_judged_by_its_transaction(body, want):
    assert codes(django(IN_TXN, body)) == [(HEAD_LINES + line, code) for line, code in want]


def test_transaction_model_under_a_lock_message_names_the_lock():
    found = analyze_source(django(IN_TXN, """\
        def f(uid):
            with user_write_lock(uid):
                m = Item.objects.get(pk=uid)
                m.n += 1
                m.save()
        """))
    assert [f.code for f in found] == ["TXN106"]
    msg = found[0].message
    assert "@written_in_transaction" in msg and "`Item`" in msg
    assert "user_write_lock(uid)" in msg and "outside any transaction" in msg


def test_transaction_or_lock_model_keeps_counting_the_lock():
    body = """\
        def f(uid):
            with user_write_lock(uid):
                m = Item.objects.get(pk=uid)
                m.n += 1
                m.save()
        """
    assert codes(django(TXN_OR_LOCK, body)) == []
    assert codes(django("", body)) == []


def test_transaction_model_helper_called_under_a_lock_is_still_reported():
    helper = """\
        def bump(uid):
            m = Item.objects.get(pk=uid)
            m.n += 1
            m.save()


        def view(uid):
            with {outer}:
                bump(uid)
        """
    assert codes(django(IN_TXN, helper.format(outer="user_write_lock(uid)"))) == [
        (HEAD_LINES + 4, "TXN106")]
    # a caller's transaction does protect it (as for a model without a policy)
    assert codes(django(IN_TXN, helper.format(outer="transaction.atomic()"))) == []
    assert codes(django(TXN_OR_LOCK, helper.format(outer="user_write_lock(uid)"))) == []


# -- across modules (txnsafety lint)

MODELS = textwrap.dedent("""\
    from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

    import txnsafety


    class Base(DeclarativeBase):
        pass


    @txnsafety.dangerously_written_outside_transaction(reason="legacy")
    class Tally(Base):
        __tablename__ = "tally"
        id: Mapped[int] = mapped_column(primary_key=True)
        n: Mapped[int] = mapped_column(default=0)


    @txnsafety.versioned("version")
    class Doc(Base):
        __tablename__ = "doc"
        id: Mapped[int] = mapped_column(primary_key=True)
        n: Mapped[int] = mapped_column(default=0)
        version: Mapped[int] = mapped_column(default=1)


    @txnsafety.written_with_user_lock(lambda card: card.user_id)
    class Card(Base):
        __tablename__ = "card"
        user_id: Mapped[int] = mapped_column(primary_key=True)
        n: Mapped[int] = mapped_column(default=0)


    class Plain(Base):
        __tablename__ = "plain"
        id: Mapped[int] = mapped_column(primary_key=True)
        n: Mapped[int] = mapped_column(default=0)
    """)

HANDLERS = """\
    {imports}


    def bump_tally(session, pk):
        tally = session.get({tally}, pk)
        tally.n += 1
        session.commit()


    def bump_doc(session, pk):
        doc = session.get({doc}, pk)
        doc.n += 1
        session.commit()


    def bump_card(session, pk):
        with session.begin():
            card = session.get({card}, pk, with_for_update=True)
            card.n += 1


    def bump_plain(session, pk):
        plain = session.get({plain}, pk)
        plain.n += 1
        session.commit()
    """

VARIANTS = {
    "relative": ("from .models import Tally, Doc, Card, Plain", "Tally", "Doc", "Card", "Plain"),
    "absolute": ("from app.models import Tally, Doc, Card, Plain", "Tally", "Doc", "Card", "Plain"),
    "alias": ("from .models import Tally as Hits, Doc as Page, Card as Stamps, Plain as Note",
              "Hits", "Page", "Stamps", "Note"),
    "module": ("from . import models", "models.Tally", "models.Doc", "models.Card", "models.Plain"),
    "re_export": ("from app import Tally, Doc, Card, Plain", "Tally", "Doc", "Card", "Plain"),
}


def project(tmp_path, imports, *names, models=MODELS):
    pkg = tmp_path / "app"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from .models import Tally, Doc, Card, Plain\n")
    (pkg / "models.py").write_text(models)
    tally, doc, card, plain = names
    (pkg / "views.py").write_text(textwrap.dedent(HANDLERS).format(
        imports=imports, tally=tally, doc=doc, card=card, plain=plain))
    return tmp_path


def findings(capsys):
    out = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    return sorted((line.split(":", 3)[3].split()[0], line.split("`")[1]) for line in out)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_policies_cross_modules(tmp_path, capsys, variant):
    root = project(tmp_path, *VARIANTS[variant])
    assert main([str(root)]) == 1
    assert findings(capsys) == [("TXN106", "card.n"), ("TXN106", "plain.n")]


def test_no_cross_module_does_not_see_the_policies(tmp_path, capsys):
    root = project(tmp_path, *VARIANTS["relative"])
    assert main([str(root), "--no-cross-module"]) == 1
    assert findings(capsys) == [("TXN106", "doc.n"), ("TXN106", "plain.n"), ("TXN106", "tally.n")]


def test_policy_of_a_base_in_another_module(tmp_path, capsys):
    root = project(tmp_path, "from .models import Doc, Card, Plain\nfrom .legacy import Old",
                   "Old", "Doc", "Card", "Plain")
    (root / "app" / "legacy.py").write_text(textwrap.dedent("""\
        from .models import Tally


        class Old(Tally):
            __tablename__ = "old"
        """))
    assert main([str(root)]) == 1
    assert findings(capsys) == [("TXN106", "card.n"), ("TXN106", "plain.n")]


def test_same_name_in_an_unrelated_module_has_no_policy(tmp_path, capsys):
    root = project(tmp_path, "from .other import Tally\nfrom .models import Doc, Card, Plain",
                   "Tally", "Doc", "Card", "Plain")
    (root / "app" / "other.py").write_text("class Tally:\n    n = 0\n")
    assert main([str(root)]) == 1
    assert findings(capsys) == [("TXN106", "card.n"), ("TXN106", "plain.n"), ("TXN106", "tally.n")]


def test_loader_helper_in_the_models_module(tmp_path, capsys):
    """A helper that returns the entity carries its model's policy to the caller."""
    models = MODELS + textwrap.dedent("""\


        def load_tally(session, pk):
            return session.get(Tally, pk)
        """)
    root = project(tmp_path, "from .models import Doc, Card, Plain", "Tally", "Doc", "Card", "Plain",
                   models=models)
    views = root / "app" / "views.py"
    views.write_text(views.read_text().replace(
        "tally = session.get(Tally, pk)", "tally = load_tally(session, pk)").replace(
        "from .models import Doc", "from .models import load_tally, Doc"))
    assert main([str(root)]) == 1
    assert findings(capsys) == [("TXN106", "card.n"), ("TXN106", "plain.n")]


def test_unusual_decorators_do_not_crash():
    src = """\
        import txnsafety

        @(lambda cls: cls)
        @txnsafety.written_with_user_lock
        @txnsafety[0]
        @txnsafety.versioned()()
        class Item:
            n = 0

        def f(session, pk):
            m = session.get(Item, pk)
            m.n += 1
            session.commit()
        """
    assert [c for _l, c in codes(src)] == ["TXN106"]
