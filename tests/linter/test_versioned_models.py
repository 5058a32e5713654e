"""Versioned (optimistically locked) models are known across the modules of a project."""
from __future__ import annotations

import textwrap

import pytest

from txnsafety_lint.analysis import analyze_source
from txnsafety_lint.cli import main

MODELS = textwrap.dedent("""\
    from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


    class Base(DeclarativeBase):
        pass


    class Doc(Base):
        __tablename__ = "doc"
        id: Mapped[int] = mapped_column(primary_key=True)
        n: Mapped[int] = mapped_column(default=0)
        version: Mapped[int] = mapped_column(nullable=False)
        __mapper_args__ = {"version_id_col": version}


    class Plain(Base):
        __tablename__ = "plain"
        id: Mapped[int] = mapped_column(primary_key=True)
        n: Mapped[int] = mapped_column(default=0)
    """)

HANDLERS = """\
    {imports}


    def bump_doc(session, pk):
        doc = session.get({doc}, pk)
        doc.n += 1
        session.commit()


    def bump_plain(session, pk):
        plain = session.get({plain}, pk)
        plain.n += 1
        session.commit()
    """

VARIANTS = {
    "relative": ("from .models import Doc, Plain", "Doc", "Plain"),
    "absolute": ("from app.models import Doc, Plain", "Doc", "Plain"),
    "alias": ("from .models import Doc as Page, Plain as Note", "Page", "Note"),
    "module": ("from . import models", "models.Doc", "models.Plain"),
    "module_absolute": ("from app import models", "models.Doc", "models.Plain"),
}


def project(tmp_path, imports, doc, plain, models=MODELS):
    pkg = tmp_path / "app"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "models.py").write_text(models)
    (pkg / "views.py").write_text(textwrap.dedent(HANDLERS).format(imports=imports, doc=doc,
                                                                   plain=plain))
    return tmp_path


def lines_of(out):
    return [line for line in out.splitlines() if line.strip()]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_versioned_model_from_another_module(tmp_path, capsys, variant):
    root = project(tmp_path, *VARIANTS[variant])
    assert main([str(root)]) == 1
    out = lines_of(capsys.readouterr().out)
    assert len(out) == 1, out
    assert "views.py:" in out[0] and "TXN106" in out[0] and "`plain.n`" in out[0]


def test_no_cross_module_does_not_see_other_files(tmp_path, capsys):
    root = project(tmp_path, *VARIANTS["relative"])
    assert main([str(root), "--no-cross-module"]) == 1
    out = capsys.readouterr().out
    assert "`doc.n`" in out and "`plain.n`" in out          # same as flake8 on views.py alone


def test_configured_versioned_models_still_apply(tmp_path, capsys):
    root = project(tmp_path, *VARIANTS["relative"])
    cfg = tmp_path / "pyproject.toml"
    cfg.write_text('[tool.txnsafety]\nversioned-models = ["Plain"]\n')
    assert main([str(root), "--no-cross-module", "--config", str(cfg)]) == 1
    out = lines_of(capsys.readouterr().out)
    assert len(out) == 1 and "`doc.n`" in out[0]


def test_re_export_through_package_init(tmp_path, capsys):
    root = project(tmp_path, "from app import Doc, Plain", "Doc", "Plain")
    (root / "app" / "__init__.py").write_text("from .models import Doc, Plain\n")
    assert main([str(root)]) == 1
    out = lines_of(capsys.readouterr().out)
    assert len(out) == 1 and "`plain.n`" in out[0], out


def test_subclass_of_a_versioned_base_in_another_module(tmp_path, capsys):
    models = MODELS + textwrap.dedent("""\


        class VersionedBase(Base):
            __abstract__ = True
            version: Mapped[int] = mapped_column(nullable=False)
            __mapper_args__ = {"version_id_col": version}
        """)
    root = project(tmp_path, "from .models import Plain\nfrom .invoices import Invoice",
                   "Invoice", "Plain", models=models)
    (root / "app" / "invoices.py").write_text(textwrap.dedent("""\
        from .models import VersionedBase


        class Invoice(VersionedBase):
            __tablename__ = "invoice"
        """))
    assert main([str(root)]) == 1
    out = lines_of(capsys.readouterr().out)
    assert len(out) == 1 and "`plain.n`" in out[0], out


def test_same_name_in_an_unrelated_module_is_not_versioned(tmp_path, capsys):
    """Knowledge follows imports, not bare class names."""
    root = project(tmp_path, "from .other import Doc\nfrom .models import Plain", "Doc", "Plain")
    (root / "app" / "other.py").write_text(textwrap.dedent("""\
        class Doc:
            n = 0
        """))
    assert main([str(root)]) == 1
    out = capsys.readouterr().out
    assert "`doc.n`" in out and "`plain.n`" in out


def test_local_subclass_of_versioned_base_in_one_module():
    src = textwrap.dedent("""\
        from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


        class Base(DeclarativeBase):
            pass


        class Versioned(Base):
            __abstract__ = True
            version: Mapped[int] = mapped_column(nullable=False)
            __mapper_args__ = {"version_id_col": version}


        class Doc(Versioned):
            __tablename__ = "doc"


        def bump(session, pk):
            doc = session.get(Doc, pk)
            doc.n += 1
            session.commit()
        """)
    assert analyze_source(src) == []
