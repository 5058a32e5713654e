"""A model another package defines has unique keys the project cannot show.

Galaxy's app inserts ``Tag`` rows after a lookup by name; ``Tag`` and its
``UniqueConstraint(name)`` live in ``galaxy-data``, which a run over the app never reads.
The check-then-insert is then only as sure as a guess about keys out of view: it stays a
finding, at low confidence (shown with ``--min-confidence low``).  The same shape on a model
the project defines without a key is reported as before."""
from __future__ import annotations

import json
import textwrap

from txnsafety_lint.cli import main

MODELS = textwrap.dedent("""\
    from sqlalchemy import Integer, String
    from sqlalchemy.orm import DeclarativeBase, mapped_column


    class Base(DeclarativeBase):
        pass


    class Label(Base):
        __tablename__ = "label"
        id = mapped_column(Integer, primary_key=True)
        name = mapped_column(String(255))
    """)
VIEWS = textwrap.dedent("""\
    from sqlalchemy import select

    from datapkg.model import Tag
    from .models import Label, get_model

    Member = get_model("members")     # made at import time: the project's own model


    def add_tag(session, name):
        if not session.scalars(select(Tag).where(Tag.name == name)).first():
            session.add(Tag(name=name))
            session.commit()


    def add_label(session, name):
        if not session.scalars(select(Label).where(Label.name == name)).first():
            session.add(Label(name=name))
            session.commit()


    def add_member(session, name):
        if not session.scalars(select(Member).where(Member.name == name)).first():
            session.add(Member(name=name))
            session.commit()
    """)


def _project(tmp_path):
    pkg = tmp_path / "app"
    pkg.mkdir()
    (tmp_path / "pyproject.toml").write_text("[tool.txnsafety]\n")
    (pkg / "__init__.py").write_text("")
    (pkg / "models.py").write_text(MODELS)
    (pkg / "views.py").write_text(VIEWS)
    return tmp_path


def _findings(capsys, *args):
    capsys.readouterr()
    main([*args, "--format", "json", "--exit-zero", "--no-cache"])
    return {(r["line"], r["code"]): r["confidence"] for r in json.loads(capsys.readouterr().out)}


def test_another_packages_model_is_reported_at_low_confidence(tmp_path, capsys):
    root = str(_project(tmp_path))
    loose = _findings(capsys, root, "--min-confidence", "low", "--min-severity", "low")
    assert loose == {(11, "TXN105"): "low", (17, "TXN105"): "high", (23, "TXN105"): "high"}
    assert _findings(capsys, root) == {(17, "TXN105"): "high", (23, "TXN105"): "high"}


def test_the_same_model_defined_in_the_project_is_sure(tmp_path, capsys):
    root = _project(tmp_path)
    data = root / "datapkg"
    data.mkdir()
    (data / "__init__.py").write_text("")
    (data / "model.py").write_text(MODELS.replace("Label", "Tag").replace('"label"', '"tag"'))
    assert _findings(capsys, str(root)) == {(11, "TXN105"): "high", (17, "TXN105"): "high",
                                            (23, "TXN105"): "high"}


def test_a_managers_own_create_is_not_another_packages_model(tmp_path, capsys):
    """``self.create()`` in a manager inserts a row of the manager's model: ``self`` names
    no class, so nothing is out of view (allauth's ``EmailAddressManager.add_email``)."""
    root = _project(tmp_path)
    (root / "app" / "managers.py").write_text(textwrap.dedent("""\
        from django.db import models


        class EmailManager(models.Manager):
            def add_email(self, user, email):
                try:
                    return self.get(user=user, email__iexact=email)
                except self.model.DoesNotExist:
                    return self.create(user=user, email=email)
        """))
    found = _findings(capsys, str(root), "--min-severity", "low")
    assert found[(9, "TXN105")] == "high"
