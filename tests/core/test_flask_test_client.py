"""Flask's test client: the test's own code after ``client.get()`` is outside the request.

Werkzeug's test client hands the response back unread and unclosed.  A real Flask app
with Flask-SQLAlchemy, wired as the README says, on a SQLite file.  The request signs a
profile under its user lock; the test then changes the profile without the lock.  That
write is reported, and the report names the test, not the request.  A made body (Flask's usual response) ends the
request's scope when the app returns; a streamed one keeps it while it streams, and only
its own code runs in it.
"""
from __future__ import annotations

import logging

import pytest

import txnsafety
from txnsafety.context import request_of_locks
from txnsafety.locks import user_write_lock

flask = pytest.importorskip("flask")
flask_sqlalchemy = pytest.importorskip("flask_sqlalchemy")

from sqlalchemy import select  # noqa: E402
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column  # noqa: E402

from txnsafety.sqlalchemy import instrument  # noqa: E402
from txnsafety.wsgi import TxnSafetyMiddleware  # noqa: E402

EMAIL = "zed@example.org"


class Base(DeclarativeBase):
    pass


db = flask_sqlalchemy.SQLAlchemy(model_class=Base)


@txnsafety.written_in_transaction()
class Member(db.Model):
    """No unique key on ``email``: a look-up, then an insert of it, is a check-then-act."""

    __tablename__ = "client_member"
    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str] = mapped_column()


@txnsafety.written_with_user_lock(lambda profile: profile.id)
class Profile(db.Model):
    __tablename__ = "client_profile"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column()


def _sign(profile_id: int, signature: str) -> None:
    """A read-modify-write: the new name is made from the old one."""
    profile = db.session.get(Profile, profile_id)
    profile.name = f"{profile.name} {signature}"
    db.session.commit()


def _registered(email: str) -> bool:
    return db.session.scalars(select(Member).where(Member.email == email)).first() is not None


def _register(email: str) -> None:
    db.session.add(Member(email=email))
    db.session.commit()


def create_app(path) -> flask.Flask:
    """An application factory, wired as the README says."""
    app = flask.Flask(__name__)
    app.config["SQLALCHEMY_DATABASE_URI"] = f"sqlite:///{path}"
    db.init_app(app)
    app.wsgi_app = TxnSafetyMiddleware(app.wsgi_app)
    instrument(db)

    @app.post("/profiles/<int:profile_id>")
    def sign(profile_id):
        with user_write_lock(profile_id):
            _sign(profile_id, flask.request.form["signature"])
        return {"request": txnsafety.current_scope().id}

    @app.post("/hold/<key>")
    def hold(key):
        user_write_lock(key).__enter__()     # never exited: released when the request ends
        return {"request": txnsafety.current_scope().id}

    @app.get("/stream/<email>")
    def stream(email):
        request_id = txnsafety.current_scope().id

        def body():
            yield f"{request_id}\n"
            if not _registered(email):        # the request's own check-then-act, while it streams
                _register(email)
            yield f"{txnsafety.current_scope().id}\n"
        return flask.Response(flask.stream_with_context(body()), mimetype="text/plain")

    @app.get("/stream-locks")
    def stream_locks():
        def body():                           # whose request a lock taken here would belong to
            yield f"{txnsafety.current_scope()} {request_of_locks().id}\n"
            yield f"{txnsafety.current_scope()} {request_of_locks().id}\n"
        return flask.Response(body(), mimetype="text/plain")

    @app.get("/closing")
    def closing():
        response = flask.make_response({"request": txnsafety.current_scope().id})
        response.call_on_close(lambda: closed.append(txnsafety.current_scope().id))  # the request's code too
        return response

    closed: list[str] = []
    app.config["CLOSED"] = closed
    with app.app_context():
        db.create_all()
        db.session.add(Profile(id=1, name="ann"))
        db.session.commit()
    return app


@pytest.fixture
def app(tmp_path):
    return create_app(tmp_path / "members.sqlite3")


def test_code_after_the_call_is_the_tests_own(app, txnsafety_violations):
    test_scope = txnsafety.current_scope()
    response = app.test_client().post("/profiles/1", data={"signature": "bea"})
    assert response.status_code == 200                          # the body is not read yet
    assert txnsafety.current_scope() is test_scope
    with app.app_context():
        _sign(1, "cy")                                        # the test's own change, unlocked
    (violation,) = txnsafety_violations
    assert violation.request_id == test_scope.id != response.json["request"]
    assert violation.write_site.function == "_sign"


def test_a_lock_left_by_the_request_is_free_when_the_call_returns(app, caplog):
    with caplog.at_level(logging.WARNING, "txnsafety"):
        app.test_client().post("/hold/profile-1")
        assert "was still held when request" in caplog.text     # the request's scope has ended
    with user_write_lock("profile-1", wait_timeout=0):          # would time out if still held
        pass


def test_a_streamed_body_keeps_its_scope_and_only_its_code_runs_in_it(app, txnsafety_violations):
    test_scope = txnsafety.current_scope()
    response = app.test_client().get(f"/stream/{EMAIL}")
    assert txnsafety.current_scope() is test_scope             # between the call and the read
    opened, streamed = response.get_data(as_text=True).split()
    assert opened == streamed != test_scope.id                 # the body ran in its request
    assert txnsafety.current_scope() is test_scope
    (violation,) = txnsafety_violations
    assert violation.code.value == "TXN105" and violation.request_id == opened


def test_a_made_body_with_a_call_on_close_callback_keeps_its_scope_until_closed(app):
    """A made body (a list, not streamed) with a ``call_on_close`` callback: the callback is the
    request's code, run when the server closes the body, so the scope stays open until then."""
    test_scope = txnsafety.current_scope()
    response = app.test_client().get("/closing")
    assert txnsafety.current_scope() is test_scope
    assert app.config["CLOSED"] == []
    response.close()
    assert app.config["CLOSED"] == [response.json["request"]] != [test_scope.id]


def test_a_streamed_body_left_out_by_the_sample_sets_its_locks_request_aside_too(app, monkeypatch):
    """A request the sample leaves out still gives its locks a request (an unchecked
    scope): streamed, that scope too is set aside between the pieces and ends with the body."""
    monkeypatch.setattr(txnsafety.settings, "sample_rate", 0.0)
    test_scope = txnsafety.current_scope()
    response = app.test_client().get("/stream-locks")
    assert txnsafety.current_scope() is test_scope and request_of_locks() is test_scope
    first, second = response.get_data(as_text=True).splitlines()
    assert first == second and first.startswith("None ")      # the checker saw no request, its locks one
    assert first.split()[1] != test_scope.id
    assert txnsafety.current_scope() is test_scope and request_of_locks() is test_scope
