"""A Session shared by a test and the requests of its client: the request's write is judged
against the request's own read, not the test's.

pytest-flask (or any test that pushes an app context, then calls Flask's test client)
shares one Flask-SQLAlchemy Session between the test's code and every request: a row the
test loaded is the object the request's own query returns (an identity-map hit, no
statement).  A real Flask app wired as the README says, on a SQLite file: the request's
read-modify-write is reported the same whether the test loaded the row first or not, with
no read site in the test's code.
"""
from __future__ import annotations

import pytest

import txnsafety

flask = pytest.importorskip("flask")
pytest.importorskip("flask_sqlalchemy")

from .test_flask_blind_writes import Team, create_app, db  # noqa: E402


def _visit(app, preload: bool) -> list[txnsafety.Violation]:
    seen: list[txnsafety.Violation] = []
    txnsafety.add_listener(seen.append)
    try:
        with app.test_request_context():               # what pytest-flask pushes for the whole test
            if preload:
                team = db.session.get(Team, 1)         # the test's own look at the row
                assert team.visits == 0
            assert app.test_client().post("/teams/1/visit").text == "OK"
    finally:
        txnsafety.remove_listener(seen.append)
    return seen


def test_a_row_the_test_loaded_is_judged_by_the_requests_read(tmp_path, txnsafety_violations):
    alone = _visit(create_app(tmp_path / "alone.sqlite3"), preload=False)
    shared = _visit(create_app(tmp_path / "shared.sqlite3"), preload=True)
    assert [v.code for v in shared] == [v.code for v in alone] != []
    (violation,) = shared
    assert not violation.outside_request                       # the request's write
    assert violation.read_site is None or not violation.read_site.file.endswith(__file__.rsplit("/", 1)[-1])
    assert violation.detail["fields written"] == "visits"
