"""SQLAlchemy queries built in steps: ``query = session.query(M)``, ``query = query.filter_by(..)``.

Repository code builds a legacy ``Query`` over several statements and runs it last
(``entity = query.one()``, ``query.first()``, ``for row in query:``).  The walk knows a
query only as a chain ending in a terminal; this module tells it what a name holds once a
query is kept in it, so the later terminal reads rows of ``M`` (:func:`run`) and a loop
over the name goes over them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import libcst as cst

from ..facts.module_facts import GetInfo
from ..facts.query_selection import state_columns
from ..facts.syntax import (
    MAYBE_NONE, SQLA_TERMINALS, chain, dotted, first_arg_name, lookup_columns, terminal)
from ..facts.values import lookup_values

if TYPE_CHECKING:
    from .state import FunctionState

__all__ = ["kept", "note_kept", "run"]

#: ``Query`` methods that return a new query without running it
_BUILDERS = frozenset({"query", "filter", "filter_by", "join", "outerjoin", "order_by", "options",
                       "limit", "offset", "with_for_update", "distinct", "group_by", "having",
                       "select_from", "populate_existing", "execution_options", "params",
                       "enable_eagerloads", "autoflush", "with_entities", "yield_per"})


def kept(fa: "FunctionState", value: cst.BaseExpression) -> Optional[GetInfo]:
    """What ``value`` builds when it is a SQLAlchemy query not run yet: ``session.query(M)...``
    on a session, or more steps on a query kept earlier (``query.filter_by(..)``)."""
    if isinstance(value, cst.Call) and terminal(value) in _RUNNERS:
        return _result(fa, value)
    if isinstance(value, cst.Call) and terminal(value) in _STATEMENT_STEPS:
        statement = _statement(value)
        if statement is not None:
            return statement
    if not isinstance(value, cst.Call) or terminal(value) not in _BUILDERS:
        return None
    names, calls, root = chain(value)
    base = fa.querysets.get(root.value) if isinstance(root, cst.Name) else None
    model = None
    if base is not None and base.framework == "sqlalchemy":
        model = base.model
    else:
        base = None
        start = calls[-1]                      # the innermost call: ``session.query(M)``
        if terminal(start) != "query" or not isinstance(start.func, cst.Attribute):
            return None
        recv = start.func.value
        if not ("session" in dotted(recv).lower() or dotted(recv) in fa.sessions or fa.typed_session(recv)):
            return None
        model = first_arg_name(start)
    for_update = any(terminal(c) == "with_for_update" for c in calls) or bool(base and base.for_update)
    info = GetInfo(model, model, None, "sqlalchemy", for_update=for_update)
    info.state = state_columns(value) | (base.state if base is not None else frozenset())
    own = lookup_columns(value)
    info.lookup = own if base is None or base.lookup is None else base.lookup | (own or frozenset())
    info.lookup_values = lookup_values(value) | (base.lookup_values if base is not None else frozenset())
    return info


#: a session's methods that run a statement and give a result its terminals read rows from
_RUNNERS = frozenset({"execute", "scalars"})
#: the steps of a 2.0 ``select(M)`` statement built before it runs
_STATEMENT_STEPS = frozenset({"select", "where", "filter", "filter_by", "join", "outerjoin", "order_by",
                              "options", "limit", "offset", "with_for_update", "distinct", "group_by",
                              "having", "select_from", "execution_options", "params"})


def _statement(value: cst.Call) -> Optional[GetInfo]:
    """``stmt = select(M).where(..).with_for_update(nowait=nowait)``: a statement kept in a
    name until ``session.execute(stmt)`` runs it (rucio builds every query so).  Kept so the
    run reads rows of ``M`` with the statement's lock and lookup, as the inline form does."""
    _names, calls, _root = chain(value)
    select = calls[-1]                  # the innermost call: ``select(M)`` itself
    if terminal(select) != "select" or any(terminal(c) not in _STATEMENT_STEPS for c in calls):
        return None
    steps = {terminal(c) for c in calls}
    model = first_arg_name(select)
    if model is None:
        return None
    info = GetInfo(model, model, None, "sqlalchemy", for_update="with_for_update" in steps)
    info.statement = True
    info.lookup = lookup_columns(value)
    info.lookup_values = lookup_values(value)
    info.state = state_columns(value)
    return info


def _result(fa: "FunctionState", value: cst.Call) -> Optional[GetInfo]:
    """``result = await session.execute(select(M).where(..))`` (or ``session.scalars(stmt)``):
    a result kept in a name, whose ``result.scalar_one()`` / ``result.scalars().first()``
    later reads a row of ``M`` (``M`` unknown when the statement was built elsewhere).  Not
    an ``update()``, ``insert()`` or ``delete()`` statement: those read no row."""
    if not isinstance(value.func, cst.Attribute) or not value.args:
        return None
    recv = value.func.value
    if not ("session" in dotted(recv).lower() or dotted(recv) in fa.sessions or fa.typed_session(recv)):
        return None
    statement = value.args[0].value
    if isinstance(statement, cst.Call):
        steps = {terminal(c): c for c in reversed(chain(statement)[1])}   # innermost first, outer wins
        if "select" not in steps:
            return None
        model, state = first_arg_name(steps["select"]), state_columns(statement)
    elif isinstance(statement, cst.Name) and getattr(fa.querysets.get(statement.value), "statement", False):
        return _kept_statement_run(fa.querysets[statement.value], dotted(recv))
    elif isinstance(statement, (cst.Name, cst.Attribute)):
        steps, model, state = {}, None, frozenset()     # a statement built earlier: its model unknown
    else:
        return None
    info = GetInfo(model, model, None, "sqlalchemy", for_update="with_for_update" in steps)
    info.session = dotted(recv)           # the rows its terminal reads flush with this session
    info.lookup = lookup_columns(value)
    info.lookup_values = lookup_values(value)
    info.state = state
    return info


def _kept_statement_run(statement: GetInfo, session: str) -> GetInfo:
    """``session.execute(stmt)`` of a statement kept by :func:`_statement`: its result."""
    info = GetInfo(statement.model, statement.model, None, "sqlalchemy", for_update=statement.for_update)
    info.session = session
    info.lookup = statement.lookup
    info.lookup_values = statement.lookup_values
    info.state = statement.state
    return info


def run(base: GetInfo, term: str, mk) -> Optional[GetInfo]:
    """``query.one()`` on a query kept in a name: a read of its rows (``mk`` makes the
    walk's :class:`GetInfo` for the call); None for anything but a terminal."""
    if term not in SQLA_TERMINALS:
        return None
    info = mk(base.model, None, "sqlalchemy", maybe_none=term in MAYBE_NONE)
    info.for_update = info.for_update or base.for_update
    if getattr(base, "session", None):
        info.session = base.session
    info.lookup = info.lookup or base.lookup
    info.lookup_values = info.lookup_values | base.lookup_values
    info.state = info.state | base.state
    return info


def note_kept(fa: "FunctionState", targets, value: cst.BaseExpression) -> set[str]:
    """Remember the query ``value`` builds in each plain name it is assigned to; the names."""
    info = kept(fa, value)
    if info is None:
        return set()
    out = set()
    for t in targets:
        if isinstance(t.target, cst.Name):
            fa.querysets[t.target.value] = info
            out.add(t.target.value)
    return out
