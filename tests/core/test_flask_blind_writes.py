"""A write the checker cannot see computed from the read is blind, however its value compares.

A real Flask app with Flask-SQLAlchemy, wired as the README says, on a SQLite file
(pysqlite's legacy mode: reads run outside the transaction, so a read-modify-write is
reported).  An edit form and a JSON PUT assign the submitted values: a number that
changed, an address that contains the old one, a name copied from a schema object whose
attribute has the same name.  Their values look derived; the code assigning them reads
another object's attribute (``self.share.data``, ``body.banner``), so they are written
blind and not reported.  The racy twins, a counter and a text computed from the row's own
value, still are.  (The code decides per attribute: a column some code computes from
itself is taken as derived at every write, in every module loaded, so the twins write
columns of their own, and the form's columns have names no other test derives.)
"""
from __future__ import annotations

import pytest

import txnsafety

flask = pytest.importorskip("flask")
flask_sqlalchemy = pytest.importorskip("flask_sqlalchemy")

from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column  # noqa: E402

from txnsafety.sqlalchemy import instrument  # noqa: E402
from txnsafety.wsgi import TxnSafetyMiddleware  # noqa: E402


class Base(DeclarativeBase):
    pass


db = flask_sqlalchemy.SQLAlchemy(model_class=Base)


@txnsafety.written_in_transaction()
class Team(db.Model):
    __tablename__ = "blind_team"
    id: Mapped[int] = mapped_column(primary_key=True)
    banner: Mapped[str] = mapped_column()
    reply_to: Mapped[str] = mapped_column()
    share: Mapped[float] = mapped_column()
    visits: Mapped[int] = mapped_column(default=0)
    motto: Mapped[str] = mapped_column(default="go")


class Field:
    """A form field, as WTForms has them: the submitted value in ``data``."""

    def __init__(self, data):
        self.data = data


class TeamForm:
    """An edit form whose fields are named like the model's columns."""

    def __init__(self, submitted):
        self.banner = Field(submitted["banner"])
        self.reply_to = Field(submitted["reply_to"])
        self.share = Field(float(submitted["share"]))

    def update(self, team):
        team.banner = self.banner.data
        team.reply_to = self.reply_to.data
        team.share = self.share.data


class TeamBody:
    """A request body parsed into an object (a schema), attributes named like the columns."""

    def __init__(self, payload):
        self.banner = payload["banner"]


def create_app(path) -> flask.Flask:
    app = flask.Flask(__name__)
    app.config["SQLALCHEMY_DATABASE_URI"] = f"sqlite:///{path}"
    db.init_app(app)
    app.wsgi_app = TxnSafetyMiddleware(app.wsgi_app)
    instrument(db)

    @app.put("/teams/<int:team_id>")
    def edit(team_id):
        team = db.session.get(Team, team_id)
        TeamForm(flask.request.form).update(team)
        db.session.commit()
        return "UPDATED"

    @app.patch("/teams/<int:team_id>")
    def rename(team_id):
        team = db.session.get(Team, team_id)
        body = TeamBody(flask.request.get_json())
        team.banner = body.banner
        db.session.commit()
        return "UPDATED"

    @app.post("/teams/<int:team_id>/visit")
    def visit(team_id):
        team = db.session.get(Team, team_id)
        team.visits = team.visits + 1                      # a counter: derived from the read
        db.session.commit()
        return "OK"

    @app.post("/teams/<int:team_id>/sign")
    def sign(team_id):
        team = db.session.get(Team, team_id)
        team.motto = team.motto + " (signed)"              # text made from the old text
        db.session.commit()
        return "OK"

    with app.app_context():
        db.create_all()
        db.session.add(Team(id=1, banner="raclette", reply_to="alexis@example.com", share=1.0))
        db.session.commit()
    return app


@pytest.fixture
def client(tmp_path):
    return create_app(tmp_path / "teams.sqlite3").test_client()


def test_a_form_resubmitted_with_values_that_look_derived_is_blind(client, txnsafety_violations):
    form = {"banner": "raclette", "reply_to": "alexis@example.com", "share": "1"}
    assert client.put("/teams/1", data=form).text == "UPDATED"             # the same values again
    changed = {"banner": "raclette party", "reply_to": "alexis@example.com.fr", "share": "2"}
    assert client.put("/teams/1", data=changed).text == "UPDATED"          # contains the old ones
    assert txnsafety_violations == []


def test_a_body_attribute_named_like_the_column_is_blind(client, txnsafety_violations):
    assert client.patch("/teams/1", json={"banner": "raclette!"}).text == "UPDATED"
    assert txnsafety_violations == []


@pytest.mark.parametrize("path, field", [("/teams/1/visit", "visits"), ("/teams/1/sign", "motto")])
def test_a_value_computed_from_the_rows_own_is_still_reported(client, path, field, txnsafety_violations):
    assert client.post(path).text == "OK"
    (violation,) = txnsafety_violations
    assert violation.code.value in ("TXN101", "TXN109")
    assert violation.detail["fields written"] == field
