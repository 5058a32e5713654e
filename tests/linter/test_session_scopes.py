"""Session resolution (linter/sessions.py) reads each name in its own scope, stays
linear on self-referring attributes, and never fails a file or a project run.

* a function's or method's local never falls back to the module-level name of the same
  spelling (it is resolved from its own bindings, or unknown);
* dataclass constructor arguments map onto fields by position only when the order is
  known (no base class, no ``field(init=False)`` / ``KW_ONLY``);
* class attributes and methods are memoised with a cycle guard (``self.x = self.x``);
* a string is read as code only where it is an annotation, and a RecursionError during
  resolution makes that name unknown instead of skipping the file or the project.
"""
from __future__ import annotations

import ast
import textwrap

import pytest

from txnsafety_lint.facts import sessions
from txnsafety_lint.analysis import analyze_source
from txnsafety_lint.cli import main
from txnsafety_lint.facts.sessions import SessionTypes

from .helpers import ACCOUNT_MODEL

HEAD = textwrap.dedent("""\
    from dataclasses import KW_ONLY, dataclass, field
    from typing import Any

    from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

    from myapp.uow import UnitOfWork
    """) + ACCOUNT_MODEL + textwrap.dedent("""\


    Local = sessionmaker()
    db = Local()                      # a module-level session (scripts, shells)

    """)


def codes(body: str, tail: str = "") -> list[str]:
    src = textwrap.dedent(HEAD) + textwrap.dedent(body) + tail
    return [f.code for f in analyze_source(src)]


def types_of(body: str) -> tuple[SessionTypes, str]:
    src = textwrap.dedent(HEAD) + textwrap.dedent(body)
    return SessionTypes({"m.py": ast.parse(src)}), "m.py"


# ---------------------------------------------------------------- 1. locals stay local

def test_helper_returning_a_local_is_not_the_module_level_session():
    """The reviewer's /tmp/review/lint2/fp2.py: ``db`` in ``unit_of_work`` is its own."""
    assert codes("""\
        def unit_of_work():
            db = UnitOfWork(serializable=True)
            return db


        def bump(pk):
            uow = unit_of_work()
            acct = uow.get(Account, pk)
            acct.n += 1
            uow.commit()
        """) == []


def test_attribute_set_from_a_methods_local_is_not_the_module_level_session():
    assert codes("""\
        class Service:
            def start(self):
                db = UnitOfWork(serializable=True)
                self.db = db

            def bump(self, pk):
                s = self.db
                acct = s.get(Account, pk)
                acct.n += 1
                s.commit()
        """) == []


@pytest.mark.parametrize("binding", [
    "db = UnitOfWork()",
    "db: Any = UnitOfWork()",
    "db: Any",
    "db += 1",
    "db, other = UnitOfWork(), 1",
    "for db in range(3):\n    pass",
    "with UnitOfWork() as db:\n    pass",
    "try:\n    pass\nexcept Exception as db:\n    pass",
    "if (db := UnitOfWork()):\n    pass",
    "from myapp.uow import db",
    "import db",
    "def db():\n    pass",
    "class db:\n    pass",
    "db = Local()\ndb = UnitOfWork()",
    "del db",
])
def test_any_local_binding_hides_the_module_level_name(binding):
    types, key = types_of("def helper():\n" + textwrap.indent(binding, "    ") +
                          "\n    return db\n\n\ndef helper_with_param(db):\n    return db\n")
    assert types.name_type(key, "db") == "session"
    assert types.name_type(key, "helper") is None
    assert types.name_type(key, "helper_with_param") is None


@pytest.mark.parametrize("opening", [
    "for db in units:",
    "with UnitOfWork() as db:",
    "if (db := UnitOfWork()):",
    "try:\n        pass\n    except Exception as db:",
    "from myapp import db\n    if pk:",
])
def test_analysed_functions_locals_hide_the_module_level_session(opening):
    """In the function being analysed too: a local bound other than by ``name = value``
    (for / with / except targets, walrus, imports...) is not the module's ``db``."""
    body = "def bump(units, pk):\n    " + opening + """
        acct = db.get(Account, pk)
        acct.n += 1
        db.commit()
"""
    assert codes("", body) == []


def test_analysed_function_still_sees_the_module_level_session():
    assert codes("", """\
def bump(pk):
    acct = db.get(Account, pk)
    acct.n += 1
    db.commit()
""") == ["TXN106"]


def test_a_global_declaration_reads_the_module_level_name():
    types, key = types_of("""\
        def helper():
            global db
            db = Local()
            return db
        """)
    assert types.name_type(key, "helper") == "fn:session"


def test_a_local_is_resolved_from_its_own_assignments():
    types, key = types_of("""\
        def opened():
            s = Local()
            return s


        def maker():
            from sqlalchemy.orm import sessionmaker as sm
            return sm()


        def unknown(flag):
            s = Local() if flag else UnitOfWork()
            return s
        """)
    assert types.name_type(key, "opened") == "fn:session"
    assert types.name_type(key, "maker") == "fn:factory"
    assert types.name_type(key, "unknown") is None


def test_method_locals_and_parameters_are_not_module_names():
    types, key = types_of("""\
        class Service:
            def __init__(self, maker):
                self.maker = maker          # a constructor argument, mapped from calls

            def start(self, db):
                self.db = db                # a parameter: unknown

            def local(self):
                Local = UnitOfWork()
                self.other = Local

            def opened(self):
                s = Local()
                self.own = s
        """)
    inst = f"inst:{key}:Service"
    assert types.member_type(key, "Service", "db", 0) is None
    assert types.member_type(key, "Service", "other", 0) is None
    assert types.member_type(key, "Service", "own", 0) == "session"
    assert types.type_of(key, ("attr", ("name", "s"), "maker"), {"s": inst}) is None


def test_constructor_arguments_are_read_in_the_callers_scope():
    assert codes("""\
        @dataclass
        class Stack:
            url: str
            Auto: Any


        def build(Local):
            return Stack("sqlite://", Local)


        def bump(stack: Stack, pk):
            with stack.Auto() as own:
                acct = own.get(Account, pk)
                acct.n += 1
                own.commit()
        """) == []


# -- dataclass fields by position

STACKS = """\
    @dataclass
    class Settings:
        url: str


    @dataclass
    class Stack(Settings):
        cache: Any
        Auto: Any = None


    STACK = Stack("sqlite://", Local, {})


    def bump(stack: Stack, pk):
        with stack.Auto() as own:
            acct = own.get(Account, pk)
            acct.n += 1
            own.commit()
    """


def test_base_class_fields_come_first():
    """``Local`` lands in ``cache`` (``url`` is the base's): ``Auto`` is no factory."""
    assert codes(STACKS) == []
    types, key = types_of(STACKS)
    assert types.member_type(key, "Stack", "cache", 0) is None   # not guessed either


def test_keyword_arguments_still_map_with_a_base_class():
    assert codes(STACKS.replace('Stack("sqlite://", Local, {})',
                                'Stack("sqlite://", {}, Auto=Local)')) == ["TXN106"]


@pytest.mark.parametrize("decorator, fields, call, expected", [
    # ``skip`` is no __init__ parameter: ``Local`` lands in ``cache``, not ``Auto``
    ("@dataclass", "url: str\nskip: Any = field(init=False)\nAuto: Any = None\ncache: Any = None",
     'Stack("sqlite://", {}, Local)', []),
    # a kw_only field moves to the end of __init__: ``Local`` lands in ``cache``
    ("@dataclass", "url: str\nAuto: Any = field(default=None, kw_only=True)\ncache: Any = None",
     'Stack("sqlite://", Local)', []),
    # keyword arguments still map
    ("@dataclass", "url: str\n_: KW_ONLY\nAuto: Any = None", 'Stack("sqlite://", Auto=Local)',
     ["TXN106"]),
    ("@dataclass(kw_only=True)", "url: str\nAuto: Any = None", 'Stack(url="x", Auto=Local)',
     ["TXN106"]),
    ("@dataclass", "url: str\nskip: Any = field(init=False)\nAuto: Any = None",
     'Stack("sqlite://", Auto=Local)', ["TXN106"]),
])
def test_init_false_and_kw_only_fields_stop_positional_mapping(decorator, fields, call, expected):
    src = decorator + "\nclass Stack:\n" + textwrap.indent(fields, "    ") + f"""


STACK = {call}


def bump(stack: Stack, pk):
    with stack.Auto() as own:
        acct = own.get(Account, pk)
        acct.n += 1
        own.commit()
"""
    assert codes("", src) == expected


def test_a_plain_dataclass_still_maps_by_position():
    assert codes("""\
        @dataclass
        class Stack:
            url: str
            Auto: Any


        STACK = Stack("sqlite://", Local)


        def bump(stack: Stack, pk):
            with stack.Auto() as own:
                acct = own.get(Account, pk)
                acct.n += 1
                own.commit()
        """) == ["TXN106"]


# ---------------------------------------------------------------- 2. linear on cycles

class _Budget(Exception):
    pass


def _counting(monkeypatch, budget: int) -> list[int]:
    calls = [0]
    original = SessionTypes.type_of

    def counted(self, *args, **kwargs):
        calls[0] += 1
        if calls[0] > budget:
            raise _Budget(calls[0])
        return original(self, *args, **kwargs)

    monkeypatch.setattr(SessionTypes, "type_of", counted)
    return calls


def _machine(k: int) -> str:
    return "class Machine:\n    def step(self):\n" + "        self.state = self.state\n" * k


def test_self_assigned_attribute_costs_linear_resolution(monkeypatch):
    """/tmp/review/lint/slow.py: k self-assignments cost ~k**6 resolutions before; now
    each (class, attribute) is resolved once: a few calls per assignment."""
    k = 30
    calls = _counting(monkeypatch, budget=10 * k)
    types = SessionTypes({"f.py": ast.parse(_machine(k))})
    got = types.type_of("f.py", ("attr", ("name", "self"), "state"), {"self": "inst:f.py:Machine"})
    assert got is None
    assert calls[0] <= 3 * k + 10, calls[0]


def test_mutually_referring_attributes_cost_linear_resolution(monkeypatch):
    k = 30
    src = "class Machine:\n    def step(self):\n" + \
        "        self.a = self.b\n        self.b = self.a\n" * k
    calls = _counting(monkeypatch, budget=20 * k)
    types = SessionTypes({"f.py": ast.parse(src)})
    assert types.member_type("f.py", "Machine", "a", 0) is None
    assert calls[0] <= 6 * k + 10, calls[0]


def test_pathological_file_lints(monkeypatch):
    """The whole linter on the reviewer's file with k = 200 (was: 56 s at k = 22)."""
    k = 200
    calls = _counting(monkeypatch, budget=50 * k)
    src = textwrap.dedent(HEAD) + _machine(k) + textwrap.dedent("""\


        def bump(m: Machine, pk):
            s = m.state
            acct = s.get(Account, pk)
            acct.n += 1
            s.commit()
        """)
    assert [f.code for f in analyze_source(src)] == []
    assert calls[0] <= 10 * k


# ---------------------------------------------------------------- 3. strings, recursion

DEEP = '\n\nPATH = "' + ".".join(["a"] * 5000) + '"\nNESTED = "' + "(" * 500 + ")" * 500 + '"\n'


def test_string_constants_are_not_read_as_code():
    """Only annotations are; ``Make = "Local"`` is a string, not the factory."""
    assert codes("""\
        Make = "Local"


        def bump(pk):
            with Make() as own:
                acct = own.get(Account, pk)
                acct.n += 1
                own.commit()
        """) == []


def test_string_annotations_are_still_read():
    assert codes("""\
        @dataclass
        class Stack:
            url: str
            Auto: "sessionmaker"


        def bump(stack: "Stack", pk):
            with stack.Auto() as own:
                acct = own.get(Account, pk)
                acct.n += 1
                own.commit()
        """) == ["TXN106"]


def test_too_long_or_too_deep_annotation_strings_are_unknown():
    assert sessions.shape_of_ast(ast.Constant("sessionmaker"), annotation=True) == \
        ("name", "sessionmaker")
    assert sessions.shape_of_ast(ast.Constant("sessionmaker"), annotation=False) is None
    assert sessions.shape_of_ast(ast.Constant("a." * 300 + "a"), annotation=True) is None
    assert sessions.shape_of_ast(ast.Constant("(" * 150 + ")" * 150), annotation=True) is None


def test_deeply_nested_string_constant_keeps_the_file_findings():
    """/tmp/review/lint3/app.py under flake8 (one file): findings, not silence."""
    assert codes("""\
        def bump(pk):
            with Local() as own:
                acct = own.get(Account, pk)
                acct.n += 1
                own.commit()
        """, DEEP) == ["TXN106"]


def test_deeply_nested_string_constant_keeps_the_project_run(tmp_path, capsys):
    """/tmp/review/lint3/app.py under ``txnsafety lint``: was "skipped (RecursionError)",
    rc 2 and every cross-module finding of the run lost."""
    pkg = tmp_path / "app"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "engines.py").write_text(textwrap.dedent("""\
        from sqlalchemy.orm import sessionmaker

        Local = sessionmaker()
        """) + DEEP)
    (pkg / "views.py").write_text(textwrap.dedent(HEAD).replace("db = Local()", "") +
                                  textwrap.dedent("""\
        from .engines import Local as Made


        def bump(pk):
            with Made() as own:
                acct = own.get(Account, pk)
                acct.n += 1
                own.commit()
        """))
    rc = main([str(tmp_path), "--format", "text"])
    captured = capsys.readouterr()
    assert "skipped" not in captured.err
    assert rc == 1
    assert [line.split()[1] for line in captured.out.splitlines()] == ["TXN106"]


def test_recursion_error_during_resolution_is_unknown(monkeypatch):
    types, key = types_of("""\
        Other = Local
        """)
    original = SessionTypes._name_type

    def overflowing(self, k, name, depth):
        if name == "Local":
            raise RecursionError
        return original(self, k, name, depth)

    monkeypatch.setattr(SessionTypes, "_name_type", overflowing)
    assert types.expression_type(key, ("call", ("name", "Other"), (), ()), {}) is None
    assert types.name_type(key, "db") is None
    monkeypatch.setattr(SessionTypes, "type_of", lambda *a, **k: (_ for _ in ()).throw(RecursionError))
    assert types.expression_type(key, ("name", "db"), {}) is None
    assert types.param_type(key, ("name", "Local")) is None
