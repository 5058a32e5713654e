"""The statement and flush hooks are in place only while a checked scope is open (``checked_hooks.py``).

A request the sample leaves out (``sample_rate``) finds SQLAlchemy's ``loading.instances`` and the
``before_update`` / ``after_insert`` listeners as if txnsafety were not installed, once no checked
scope is open in the process; a checked request puts them back before it runs anything.  What is
checked must not change: a checked request after many left-out ones, on a Session made before the
sample decided, or next to a left-out request in another thread, catches its lost update.

Under pytest the plugin's own scope is open around every test, which keeps the hooks in: these
tests set it aside (``outside_every_scope``) so that the test's thread runs outside every checked scope,
as a server's does.
"""
from __future__ import annotations

import gc
import logging
import threading
import weakref
from contextlib import contextmanager

from sqlalchemy.orm import loading
from webob import Request, Response

import txnsafety
from fixtures.sqla_app.models import Counter
from txnsafety import checked_hooks, context
from txnsafety.config import settings
from txnsafety.sqlalchemy import events, reads
from txnsafety.sqlalchemy.updates import before_update
from txnsafety.wsgi import TxnSafetyMiddleware


@contextmanager
def outside_every_scope():
    """The test's own code outside every checked scope: the pytest plugin's scope (opened around
    the test's call) set aside, its context variable and its count as open, and so is any scope an
    earlier test of this process opened and never closed (a streamed body left unclosed keeps its
    scope open, which keeps the hooks in); all put back after."""
    scope = context.current_scope()
    assert scope is not None
    token = context._state.set(context._EMPTY)
    with checked_hooks._lock:
        left_open = dict(checked_hooks.OPEN)
        checked_hooks.OPEN.clear()
    try:
        yield
    finally:
        for key, opened in left_open.items():               # counted open again, the hooks in with them
            for _ in range(opened):
                checked_hooks.scope_opened(key)
        context._state.reset(token)


def _serve(app, path="/count"):
    status, _, body = Request.blank(path, method="POST").call_application(TxnSafetyMiddleware(app))
    b"".join(body)
    getattr(body, "close", lambda: None)()
    assert status == "200 OK"


def _hooks_in() -> tuple[bool, bool, bool]:
    """(loading.instances, before_update, after_insert): each True when txnsafety's hook is in place."""
    return (loading.instances is reads._instances, events.BEFORE_UPDATE.listener.func is before_update,
            events.AFTER_INSERT.listener.func is events._after_insert)


IN, OUT = (True, True, True), (False, False, False)


def _lost_update_app(sessions, seen):
    """A read-modify-write in a READ COMMITTED transaction (TXN109 when checked); ``seen`` gets the
    hooks' state after its first statement."""
    def app(environ, start_response):
        session = sessions()
        counter = session.get(Counter, 1)
        seen.append(_hooks_in())
        counter.n += 1
        session.commit()
        return Response(json={})(environ, start_response)
    return app


def test_a_checked_request_after_many_left_out_ones_catches_the_lost_update(
        stack, sample_rate, txnsafety_violations):
    seen = []
    app = _lost_update_app(lambda: stack.Weak(), seen)
    with outside_every_scope():
        _serve(app)                                         # checked
        sample_rate(0.0)
        for _ in range(20):
            _serve(app)                                     # left out: its first statement takes the hooks out
        sample_rate(1.0)
        _serve(app)                                         # checked: in again before its first statement
        assert checked_hooks.hooks_on()                     # until something finds no scope open
    assert seen == [IN] + [OUT] * 20 + [IN]
    assert txnsafety_violations.codes() == ["TXN109", "TXN109"]


def test_a_session_made_before_the_sample_decided_is_checked_when_its_request_is(
        stack, sample_rate, txnsafety_violations):
    seen = []
    with outside_every_scope():
        sample_rate(0.0)
        _serve(_lost_update_app(lambda: stack.Weak(), []))  # the hooks out
        session = stack.Weak()                              # made outside any request, with the hooks out
        app = _lost_update_app(lambda: session, seen)
        _serve(app)                                         # left out: its first use
        sample_rate(1.0)
        _serve(app)                                         # checked
        session.close()
    assert seen == [OUT, IN]
    assert txnsafety_violations.codes() == ["TXN109"]


def test_a_long_lived_sessions_notes_stay_through_requests_left_out_with_the_hooks_out(
        stack, sample_rate, txnsafety_violations):
    seen = []
    with outside_every_scope():
        session = stack.Weak()
        app = _lost_update_app(lambda: session, seen)
        _serve(app)                                         # checked: its read noted, TXN109
        notes = dict(session.info[reads.INFO_KEY].reads)
        sample_rate(0.0)
        for _ in range(3):
            _serve(app)
        assert session.info[reads.INFO_KEY].reads == notes  # nothing noted, nothing dropped
        sample_rate(1.0)
        _serve(app)
        session.close()
    assert seen == [IN, OUT, OUT, OUT, IN]
    assert txnsafety_violations.codes() == ["TXN109", "TXN109"]


def test_a_request_left_out_leaves_the_hooks_in_while_a_checked_one_is_open_in_another_thread(
        stack, txnsafety_violations):
    """The checked request opens its scope and waits; requests left out run their statements and
    flushes meanwhile in this thread (no checked scope in their context); then the checked one reads
    and writes, and is caught."""
    opened, go = threading.Event(), threading.Event()
    checked_seen, left_out_seen = [], []
    checked_app = _lost_update_app(lambda: stack.Weak(), checked_seen)

    def waiting(environ, start_response):
        opened.set()
        assert go.wait(30)
        return checked_app(environ, start_response)

    thread = threading.Thread(target=_serve, args=(waiting, "/checked"))
    txnsafety.configure(sampler=lambda method, path, headers: 1.0 if path == "/checked" else 0.0)
    try:
        with outside_every_scope():
            thread.start()
            assert opened.wait(30)
            for _ in range(3):
                _serve(_lost_update_app(lambda: stack.Weak(), left_out_seen))
            checked_hooks.idle()                            # what a hook calls when it may: not now
            left_out_seen.append(_hooks_in())
            go.set()
            thread.join(30)
    finally:
        go.set()
        settings.sampler = None
    assert left_out_seen == [IN] * 4 and checked_seen == [IN]
    assert txnsafety_violations.codes() == ["TXN109"]


def test_an_insert_in_a_request_left_out_calls_no_listener_and_a_checked_one_is_judged(stack, sample_rate):
    judged = []

    def app(environ, start_response):
        with stack.Main() as session:
            session.get(Counter, 1)
            session.add(Counter(id=100 + len(judged), n=0))
            judged.append(events.AFTER_INSERT.listener.func is events._after_insert)
            session.commit()
        return Response(json={})(environ, start_response)

    with outside_every_scope():
        sample_rate(0.0)
        _serve(app)
        sample_rate(1.0)
        _serve(app)
    assert judged == [False, True]


def test_a_hook_someone_else_put_on_loading_instances_is_left_in_place_and_logged_once(
        stack, sample_rate, caplog):
    calls = []

    def spy(cursor, context):
        calls.append(context)
        return reads._original_instances(cursor, context)

    with outside_every_scope():
        sample_rate(0.0)
        _serve(_lost_update_app(lambda: stack.Weak(), []))  # the hooks out
        loading.instances = spy
        reads._swap.warned = False
        try:
            with caplog.at_level(logging.WARNING, logger="txnsafety"):
                sample_rate(1.0)
                for _ in range(2):
                    _serve(_lost_update_app(lambda: stack.Weak(), []))
            assert loading.instances is spy
        finally:  # what the swap would have put there by now
            loading.instances = reads._instances if checked_hooks.hooks_on() else reads._original_instances
    assert len(calls) == 2
    assert [r.getMessage() for r in caplog.records if "loading.instances" in r.getMessage()] == [
        f"txnsafety: sqlalchemy.orm.loading.instances was replaced by {spy!r}, which txnsafety leaves in place: "
        "what passes there is checked only if it calls txnsafety's hook"]


def test_a_scope_never_closed_keeps_the_hooks_in_but_is_not_kept_alive(stack, sample_rate):
    """A streamed body its server abandons unclosed never closes its scope: the hooks stay in (slower,
    never less checked), and the scope itself, with what it noted, is not held by the count."""
    with outside_every_scope():
        sample_rate(0.0)
        _serve(_lost_update_app(lambda: stack.Weak(), []))  # the hooks out
        scope = context.RequestScope(name="abandoned")
        token, alive = context.open_scope(scope), weakref.ref(scope)
        context._state.reset(token)                         # its context gone, the scope never closed
        key, scope = scope.token, None
        gc.collect()
        seen = []
        try:
            _serve(_lost_update_app(lambda: stack.Weak(), seen))
            assert alive() is None
        finally:
            checked_hooks.scope_closed(key)
    assert seen == [IN]
