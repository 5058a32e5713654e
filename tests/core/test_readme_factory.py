"""The README's application-factory wiring, run as written.

The code block under "Flask with an application factory" is executed as the
application's module; a model and a view are added as an application would add
them.  Two apps from the factory (one per test, as suites make them) are served by
a real server behind the README's ``ProxyFix``: each request is checked in its own
scope, ProxyFix inside the middleware still fixes the client's address, and the
stack's attributes are visible through the middleware.
"""
from __future__ import annotations

import json
import re
import types
import urllib.request
from pathlib import Path

import pytest

import txnsafety
from fixtures.http_servers import wsgi_server

flask = pytest.importorskip("flask")
pytest.importorskip("flask_sqlalchemy")

from sqlalchemy.orm import Mapped, mapped_column  # noqa: E402

README = Path(__file__).resolve().parents[2] / "README.md"


def _factory_module() -> types.ModuleType:
    text = README.read_text(encoding="utf-8")
    section = text.split("**Flask with an application factory**", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    module = types.ModuleType("readme_factory")
    exec(compile(code, f"{README}:factory", "exec"), module.__dict__)
    return module


@pytest.fixture(scope="module")
def factory():
    module = _factory_module()
    db = module.db

    @txnsafety.written_with_user_lock(lambda note: note.id)
    class Note(db.Model):
        __tablename__ = "readme_note"
        id: Mapped[int] = mapped_column(primary_key=True)
        text: Mapped[str] = mapped_column()

    def create_app(path):
        app = module.create_app({"SQLALCHEMY_DATABASE_URI": f"sqlite:///{path}"})

        @app.post("/notes/<int:note_id>/sign")
        def sign(note_id):                              # a read-modify-write without the user lock
            note = db.session.get(Note, note_id)
            note.text = f"{note.text} {flask.request.remote_addr}"
            db.session.commit()
            return {"request": txnsafety.current_scope().id}

        with app.app_context():
            db.create_all()
            db.session.add(Note(id=1, text="hello"))
            db.session.commit()
        return app
    return types.SimpleNamespace(create_app=create_app, db=db, Note=Note)


def _sign(base: str) -> dict:
    request = urllib.request.Request(f"{base}/notes/1/sign", data=b"", method="POST",
                                     headers={"X-Forwarded-For": "203.0.113.9"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


@pytest.mark.parametrize("run", ["first app", "second app"])
def test_each_app_of_the_factory_is_checked_behind_proxyfix(factory, tmp_path, run, txnsafety_violations):
    app = factory.create_app(tmp_path / "notes.sqlite3")
    assert (app.wsgi_app.x_for, app.wsgi_app.x_proto) == (1, 1)     # ProxyFix's, through ours
    with wsgi_server(app) as base:
        answer = _sign(base)
    (violation,) = txnsafety_violations
    assert violation.request_id == answer["request"] and violation.write_site.function == "sign"
    with app.app_context():
        assert factory.db.session.get(factory.Note, 1).text == "hello 203.0.113.9"  # ProxyFix worked inside
