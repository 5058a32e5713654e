"""A request the sample leaves out (``sample_rate``) on SQLAlchemy: as if the checker were off.

Its Session keeps no checker state (no isolation verdict, no transaction identity: the
cost a tenth-checked production pays on the other nine tenths), nothing it does is
reported, and a long-lived Session's notes from checked requests stay for the next one.
The same racy read-modify-write is reported once the request is checked again.
"""
from __future__ import annotations

from webob import Request, Response

from fixtures.sqla_app.models import Counter
from txnsafety.sqlalchemy.reads import INFO_KEY
from txnsafety.wsgi import TxnSafetyMiddleware


def _serve(app):
    status, _, body = Request.blank("/count", method="POST").call_application(TxnSafetyMiddleware(app))
    b"".join(body)
    getattr(body, "close", lambda: None)()
    assert status == "200 OK"


def test_a_request_left_out_keeps_no_session_state_and_is_not_reported(stack, sample_rate, txnsafety_violations):
    states = []

    def app(environ, start_response):
        with stack.Weak() as session:                           # READ COMMITTED / SQLite's legacy mode
            counter = session.get(Counter, 1)
            counter.n += 1                                      # a lost update waiting to happen (TXN109)
            states.append(session.info.get(INFO_KEY))
            session.commit()
        return Response(json={})(environ, start_response)

    sample_rate(0.0)
    _serve(app)
    assert states == [None] and txnsafety_violations == []
    sample_rate(1.0)
    _serve(app)
    assert states[1] is not None and txnsafety_violations.codes() == ["TXN109"]


def test_a_long_lived_sessions_notes_stay_through_a_request_left_out(stack, sample_rate, txnsafety_violations):
    session = stack.Main()
    seen = []

    def read(environ, start_response):
        seen.append(session.get(Counter, 1))
        session.commit()
        return Response(json={})(environ, start_response)

    _serve(read)                                                # checked: the read is noted
    notes = dict(session.info[INFO_KEY].reads)
    assert notes
    sample_rate(0.0)
    _serve(read)                                                # left out: a new transaction, not noted
    assert session.info[INFO_KEY].reads == notes
    session.close()
    assert txnsafety_violations == []
