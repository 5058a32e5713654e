"""The SQLAlchemy exists-then-create fix (TXN105): a lookup that found nothing, then
``session.add(M(...))``, becomes ``INSERT ... ON CONFLICT DO NOTHING`` in the project's
dialect, on real files of a project made here (the model class and the dialect are read from
the project's own modules), and every shape where the rewrite would change more than the
race gets no fix, with its reason."""
from __future__ import annotations

import ast
import textwrap

import pytest

from txnsafety_lint.analysis import analyze_source
from txnsafety_lint.facts.config import Config
from txnsafety_lint.fix.apply import fixed
from txnsafety_lint.fix.model import Applicability
from txnsafety_lint.fix.plan import parses, plan_file
from txnsafety_lint.fixing import rechecker
from txnsafety_lint.report.identity import with_functions

MODELS = """\
    from sqlalchemy import Column, ForeignKey, Integer, String
    from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

    {dialect_import}


    class Base(DeclarativeBase):
        pass


    class Tag(Base):
        __tablename__ = "tag"
        id: Mapped[int] = mapped_column(primary_key=True)
        name: Mapped[str] = mapped_column(String(50))
        color: Mapped[str] = mapped_column(default="red")
        owner_id = Column(Integer, ForeignKey("user.id"))
        owner = relationship("User")
        label: Mapped[str] = mapped_column("tag_label", default="")
    """
HEAD = "from sqlalchemy import select\n\nfrom app.models import Tag\n\n\n"


def project(tmp_path, views: str, dialect_import: str = "from sqlalchemy.dialects.postgresql import JSONB",
            models: str = MODELS):
    """A project with ``app/models.py`` and ``app/views.py``; the views' path."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "pyproject.toml").write_text("[tool.txnsafety]\n")
    app = tmp_path / "app"
    app.mkdir(exist_ok=True)
    (app / "__init__.py").write_text("")
    (app / "models.py").write_text(textwrap.dedent(models).replace("{dialect_import}", dialect_import))
    path = app / "views.py"
    path.write_bytes(views.encode("utf-8"))
    return path


def fix_txn105(path):
    """(the TXN105 fix, the file after ``--fix --unsafe-fixes``) of the one TXN105 finding."""
    text = path.read_text(encoding="utf-8")
    found = with_functions(analyze_source(text, Config(), str(path)), ast.parse(text))
    plan = plan_file(str(path), found, rechecker(Config()))
    (fix,) = [fix for f, fix in plan.fixes.items() if f.code == "TXN105"]
    outcome = fixed(plan, unsafe_fixes=True)
    return fix, outcome.new if outcome.new is not None else outcome.old


def body(text: str) -> str:
    return HEAD + textwrap.dedent(text)


def test_query_first_is_none_becomes_an_insert_on_conflict_do_nothing(tmp_path):
    path = project(tmp_path, body("""\
        def add_tag(session, name, color):
            # one tag per name
            existing = session.query(Tag).filter_by(name=name).first()  # the check
            if existing is None:
                session.add(Tag(name=name, color=color))  # the insert
            session.commit()
        """))
    fix, after = fix_txn105(path)
    assert fix.applicability is Applicability.UNSAFE
    assert "from sqlalchemy.dialects.postgresql import insert\n" in after
    assert ("    # one tag per name\n    # the check\n"
            "    session.execute(insert(Tag).values(name=name, color=color)"
            ".on_conflict_do_nothing(index_elements=[\"name\"]))  # the insert\n"
            "    session.commit()\n") in after
    assert 'UniqueConstraint("name", name="uq_tag_name")' in fix.note and "migration" in fix.note
    assert "(not written for you)" in fix.note
    assert path.read_text() != after                    # planned, not written


@pytest.mark.parametrize("check", [
    "if session.scalars(select(Tag).where(Tag.name == name)).first() is None:",
    "if not session.execute(select(Tag).where(Tag.name == name)).scalar_one_or_none():",
    "if session.execute(select(Tag).filter_by(name=name)).scalars().first() is None:",
    "if session.scalar(select(Tag).where(Tag.name == name)) is None:",
])
def test_the_select_lookups_become_the_same_insert(tmp_path, check):
    path = project(tmp_path, body(f"""\
        def add_tag(session, name):
            {check}
                session.add(Tag(name=name))
            session.commit()
        """))
    fix, after = fix_txn105(path)
    assert fix.applicability is Applicability.UNSAFE, fix.description
    assert ("    session.execute(insert(Tag).values(name=name)"
            ".on_conflict_do_nothing(index_elements=[\"name\"]))\n    session.commit()\n") in after


def test_a_count_tested_for_zero_is_a_lookup_too(tmp_path):
    head = "from sqlalchemy import func, select\n\nfrom app.models import Tag\n\n\n"
    path = project(tmp_path, head + textwrap.dedent("""\
        def add_tag(session, name, color):
            used = session.scalar(select(func.count()).select_from(Tag).where(Tag.name == name))
            work()
            if not used:
                session.add(Tag(name=name, color=color))
            session.commit()
        """))
    fix, after = fix_txn105(path)
    assert fix.applicability is Applicability.UNSAFE, fix.description
    assert ("    work()\n    session.execute(insert(Tag).values(name=name, color=color)"
            ".on_conflict_do_nothing(index_elements=[\"name\"]))\n") in after
    assert "used" not in after


def test_the_dialect_comes_from_a_database_url_and_names_taken_get_an_alias(tmp_path):
    path = project(tmp_path, "from sqlalchemy import insert, select\n\nfrom app.models import Tag\n\n\n"
                   "engine_url = \"sqlite:///app.db\"\n\n\n" + textwrap.dedent("""\
        def add_tag(session, name):
            if session.query(Tag).filter(Tag.name == name).first() is None:
                session.add(Tag(name=name))
        """), dialect_import="")
    fix, after = fix_txn105(path)
    assert fix.applicability is Applicability.UNSAFE, fix.description
    assert "from sqlalchemy.dialects.sqlite import insert as sqlite_insert\n" in after
    assert "session.execute(sqlite_insert(Tag).values(name=name)" in after
    assert "(sqlite)" in fix.description


def test_an_imported_dialect_insert_is_reused_and_crlf_endings_kept(tmp_path):
    source = ("from sqlalchemy.dialects.postgresql import insert as pg_insert\r\n"
              "from app.models import Tag\r\n\r\n\r\n"
              "def add_tag(session, name):\r\n"
              "    tag = session.query(Tag).filter_by(name=name).one_or_none()\r\n"
              "    if not tag:\r\n"
              "        session.add(Tag(name=name))\r\n")
    path = project(tmp_path, source)
    fix, after = fix_txn105(path)
    assert fix.applicability is Applicability.UNSAFE
    assert after.count("import") == 2 and "\n" not in after.replace("\r\n", "")
    assert "    session.execute(pg_insert(Tag).values(name=name).on_conflict_do_nothing(" \
           "index_elements=[\"name\"]))\r\n" in after


def test_a_second_run_changes_nothing_and_the_finding_is_gone(tmp_path):
    path = project(tmp_path, body("""\
        def add_tag(session, name):
            tag = session.query(Tag).filter_by(name=name).first()
            if tag is None:
                session.add(Tag(name=name))
            session.commit()
        """))
    _fix, after = fix_txn105(path)
    assert parses(after)
    path.write_text(after)
    found = analyze_source(after, Config(), str(path))
    assert not [f for f in found if f.code == "TXN105"]
    plan = plan_file(str(path), with_functions(found, ast.parse(after)), rechecker(Config()))
    assert fixed(plan, unsafe_fixes=True).new is None


DECLINED = {
    "the row found is used afterwards": """\
        def add_tag(session, name):
            tag = session.query(Tag).filter_by(name=name).first()
            if tag is None:
                session.add(Tag(name=name))
            return tag
        """,
    "the new object is used afterwards": """\
        def add_tag(session, name):
            if session.query(Tag).filter_by(name=name).first() is None:
                tag = Tag(name=name)
                session.add(tag)
                return tag
        """,
    "an else branch": """\
        def add_tag(session, name):
            if session.query(Tag).filter_by(name=name).first() is None:
                session.add(Tag(name=name))
            else:
                log(name)
        """,
    "the miss branch does more": """\
        def add_tag(session, name):
            if session.query(Tag).filter_by(name=name).first() is None:
                session.add(Tag(name=name))
                session.commit()
        """,
    "an async function": """\
        async def add_tag(session, name):
            if session.query(Tag).filter_by(name=name).first() is None:
                session.add(Tag(name=name))
        """,
    "other values": """\
        def add_tag(session, name):
            if session.query(Tag).filter_by(name=name).first() is None:
                session.add(Tag(name=name.lower()))
        """,
    "a looked-up value that runs code": """\
        def add_tag(session):
            if session.query(Tag).filter_by(name=make_name()).first() is None:
                session.add(Tag(name=make_name()))
        """,
    "a relationship set in Python": """\
        def add_tag(session, name, user):
            if session.query(Tag).filter_by(name=name).first() is None:
                session.add(Tag(name=name, owner=user))
        """,
    "a renamed column": """\
        def add_tag(session, name):
            if session.query(Tag).filter_by(name=name).first() is None:
                session.add(Tag(name=name, label="x"))
        """,
}


@pytest.mark.parametrize("shape", list(DECLINED))
def test_no_fix_where_the_rewrite_changes_more_than_the_race(tmp_path, shape):
    source = body(DECLINED[shape])
    path = project(tmp_path, source)
    fix, after = fix_txn105(path)
    assert fix.applicability is Applicability.NONE, shape
    assert after == source


MODEL_PROBLEMS = {
    "__init__": ("    def __init__(self, **kw):\n        super().__init__(**kw)\n", "__init__"),
    "validates": ("    @validates(\"name\")\n    def check(self, key, value):\n        return value\n",
                  "@validates"),
    "mapper args": ("    __mapper_args__ = {\"version_id_col\": id}\n", "__mapper_args__"),
    "default_factory": ("    made: Mapped[str] = mapped_column(default_factory=str)\n", "default_factory"),
}


@pytest.mark.parametrize("problem", list(MODEL_PROBLEMS))
def test_no_fix_for_a_class_whose_orm_constructor_does_more(tmp_path, problem):
    extra, reason = MODEL_PROBLEMS[problem]
    source = body("""\
        def add_tag(session, name):
            if session.query(Tag).filter_by(name=name).first() is None:
                session.add(Tag(name=name))
        """)
    path = project(tmp_path, source, models=MODELS.rstrip(" ") + textwrap.indent(extra, "    "))
    fix, after = fix_txn105(path)
    assert fix.applicability is Applicability.NONE and reason in fix.description, fix.description
    assert after == source


def test_no_fix_for_mapper_events_a_dataclass_base_or_an_unseen_class(tmp_path):
    source = body("""\
        def add_tag(session, name):
            if session.query(Tag).filter_by(name=name).first() is None:
                session.add(Tag(name=name))
        """)
    events = MODELS.rstrip(" ") + "\n\n    @event.listens_for(Tag, \"before_insert\")\n" \
        "    def stamp(mapper, conn, tag):\n" \
        "        tag.color = \"blue\"\n"
    dataclass = MODELS.replace("class Base(DeclarativeBase):", "class Base(MappedAsDataclass, DeclarativeBase):")
    for models, reason in ((events, "mapper events"), (dataclass, "dataclass")):
        path = project(tmp_path, source, models=models)
        fix, _after = fix_txn105(path)
        assert fix.applicability is Applicability.NONE and reason in fix.description, fix.description
    unseen = source.replace("from app.models import Tag", "from elsewhere.models import Tag")
    fix, _after = fix_txn105(project(tmp_path, unseen))
    assert fix.applicability is Applicability.NONE and "not found" in fix.description


def test_no_fix_when_the_dialect_cannot_be_told(tmp_path):
    source = body("""\
        def add_tag(session, name):
            if session.query(Tag).filter_by(name=name).first() is None:
                session.add(Tag(name=name))
        """)
    fix, after = fix_txn105(project(tmp_path / "none", source, dialect_import=""))
    assert fix.applicability is Applicability.NONE and "cannot tell the project's database" in fix.description
    assert after == source
    both = "from sqlalchemy.dialects import postgresql, sqlite"
    fix, after = fix_txn105(project(tmp_path / "both", source, dialect_import=both))
    assert fix.applicability is Applicability.NONE and "both postgresql and sqlite" in fix.description
    # PostgreSQL's types imported, a SQLite URL as the development default: both
    path = project(tmp_path / "dev", source)
    (path.parent / "settings.py").write_text('URL = os.environ.get("DATABASE_URL", "sqlite:///dev.db")\n')
    fix, after = fix_txn105(path)
    assert fix.applicability is Applicability.NONE and "both postgresql and sqlite" in fix.description


def test_a_module_that_imports_one_dialect_is_written_for_it(tmp_path):
    source = "from sqlalchemy.dialects.sqlite import JSON\n" + body("""\
        def add_tag(session, name):
            if session.query(Tag).filter_by(name=name).first() is None:
                session.add(Tag(name=name))
        """)
    both = "from sqlalchemy.dialects import postgresql, sqlite"
    fix, after = fix_txn105(project(tmp_path, source, dialect_import=both))
    assert fix.applicability is Applicability.UNSAFE and "(sqlite)" in fix.description
    assert "from sqlalchemy.dialects.sqlite import insert\n" in after


def test_tests_of_the_project_do_not_choose_its_dialect(tmp_path):
    """A project on PostgreSQL that tests on SQLite is on PostgreSQL."""
    source = body("""\
        def add_tag(session, name):
            if session.query(Tag).filter_by(name=name).first() is None:
                session.add(Tag(name=name))
        """)
    path = project(tmp_path, source)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "conftest.py").write_text('URL = "sqlite://"\n')
    fix, _after = fix_txn105(path)
    assert fix.applicability is Applicability.UNSAFE and "(postgresql)" in fix.description
