"""Sessions made by factories whose names do not say "session" (linter/sessions.py).

A name counts as a Session when its definition shows one: a call of a ``sessionmaker`` /
``async_sessionmaker`` / ``scoped_session`` result, an attribute or dataclass field that
holds one, a function or method that returns one; across modules under ``txnsafety lint``.
Nothing is guessed: a parameter merely annotated ``Session``, an unresolvable factory and
another library's ``sessionmaker`` stay unknown (the name rule, "session" in the name,
is unchanged).
"""
from __future__ import annotations

import textwrap

from txnsafety_lint.analysis import analyze_source
from txnsafety_lint.cli import main

from .helpers import ACCOUNT_MODEL

HEAD = textwrap.dedent("""\
    from dataclasses import dataclass

    from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker
    """) + ACCOUNT_MODEL + "\n"
RMW = """\
        acct = db.get(Account, pk)
        acct.n += 1
        db.commit()
"""


def codes(body):
    src = textwrap.dedent(HEAD) + textwrap.dedent(body)
    return [f.code for f in analyze_source(src)]


def test_module_level_sessionmaker():
    assert codes("""\
        Local = sessionmaker()


        def f(pk):
            with Local() as db:
                acct = db.get(Account, pk)
                acct.n += 1
                db.commit()
        """) == ["TXN106"]


def test_init_parameter_copied_to_an_attribute():
    assert codes("""\
        class Stack:
            def __init__(self, factory):
                self.factory = factory


        STACK = Stack(sessionmaker())


        def f(stack: Stack, pk):
            db = stack.factory()
            acct = db.get(Account, pk)
            acct.n += 1
            db.commit()
        """) == ["TXN106"]


def test_method_returning_a_session():
    assert codes("""\
        class Repo:
            maker = sessionmaker()

            def open(self):
                return self.maker()


        def f(repo: Repo, pk):
            db = repo.open()
            acct = db.get(Account, pk)
            acct.n += 1
            db.commit()
        """) == ["TXN106"]


def test_annotated_session_parameter_is_not_resolved():
    """A Session handed in belongs to the caller, whose transaction this function cannot see."""
    assert codes("""\
        def f(db: Session, pk):
            acct = db.get(Account, pk)
            acct.n += 1
            db.commit()
        """) == []


def test_unresolvable_factory_is_not_guessed():
    assert codes("""\
        def f(make, pk):
            with make() as db:
                acct = db.get(Account, pk)
                acct.n += 1
                db.commit()
        """) == []


def test_another_librarys_sessionmaker_is_not_a_factory():
    src = textwrap.dedent(HEAD).replace(
        "from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker",
        "from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column\n"
        "from mylib import sessionmaker") + textwrap.dedent("""\
        Local = sessionmaker()


        def f(pk):
            with Local() as db:
                acct = db.get(Account, pk)
                acct.n += 1
                db.commit()
        """)
    assert [f.code for f in analyze_source(src)] == []


def test_a_local_hides_the_module_level_factory():
    assert codes("""\
        Local = sessionmaker()


        def f(pk, Local):
            with Local() as db:
                acct = db.get(Account, pk)
                acct.n += 1
                db.commit()
        """) == []


def test_recursive_definitions_do_not_hang():
    assert codes("""\
        def a():
            return b()


        def b():
            return a()


        def f(pk):
            db = a()
            acct = db.get(Account, pk)
            acct.n += 1
            db.commit()
        """) == []


# -- across modules (txnsafety lint)

ENGINES = textwrap.dedent("""\
    from dataclasses import dataclass
    from typing import Any

    from sqlalchemy.orm import sessionmaker

    from txnsafety.sqlalchemy import instrument


    @dataclass
    class Stack:
        url: str
        Auto: Any


    def make_stack(url: str) -> Stack:
        return Stack(url, instrument(sessionmaker()))


    Local = sessionmaker()
    """)
MODELS = textwrap.dedent("""\
    from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


    class Base(DeclarativeBase):
        pass


    class Tally(Base):
        __tablename__ = "tally"
        id: Mapped[int] = mapped_column(primary_key=True)
        n: Mapped[int] = mapped_column(default=0)
    """)
VIEWS = textwrap.dedent("""\
    from . import engines
    from .engines import Stack
    from .models import Tally


    def _bonus(stack: Stack, pk):
        with stack.Auto() as own:
            again = own.get(Tally, pk)
            again.n += 5
            own.commit()


    def internal(stack: Stack, pk):
        with stack.Auto() as db:
            tally = db.get(Tally, pk)
            _bonus(stack, pk)
            tally.n += 10
            db.commit()


    def through_module(pk):
        with engines.Local() as db:
            tally = db.get(Tally, pk)
            tally.n = tally.n * 2
            db.commit()
    """)


def project(tmp_path):
    pkg = tmp_path / "app"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "engines.py").write_text(ENGINES)
    (pkg / "models.py").write_text(MODELS)
    (pkg / "views.py").write_text(VIEWS)
    return tmp_path


def findings(capsys, *args):
    main([*args, "--format", "text"])
    return [(line.split(":")[1], line.split()[1]) for line in capsys.readouterr().out.splitlines()]


def test_dataclass_field_of_an_imported_class(tmp_path, capsys):
    """``stack: Stack`` (imported) whose ``Auto`` field the constructor call in engines.py
    fills with ``instrument(sessionmaker())``: both sessions resolve, and the helper's
    second object for the row is TXN103 (as fixtures/sqla_app's "internal" scenario)."""
    got = findings(capsys, str(project(tmp_path)))
    assert sorted(got) == [("10", "TXN106"), ("18", "TXN103"), ("18", "TXN106"),
                           ("25", "TXN102")], got        # 25: ``engines.Local()``


def test_one_file_at_a_time_cannot_resolve_imports(tmp_path, capsys):
    root = project(tmp_path)
    assert findings(capsys, str(root), "--no-cross-module") == []
