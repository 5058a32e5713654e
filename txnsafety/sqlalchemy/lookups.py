"""Check-then-act (TXN105) on SQLAlchemy: the checks a statement makes, and a table's unique keys.

A check is a SELECT keyed on exact column values of one mapped class that found
nothing (``first()``, ``one_or_none()``, ``scalar()``, ``scalar_one_or_none()`` returning
None), ``exists()`` false, a ``count()`` of 0, or a count of some rows that the calling
line compares with a limit (:mod:`txnsafety.limits`; ``Query.count()`` too).  Every one of
those goes through ``Result._only_one_row`` (private; pinned by
``tests/sqlalchemy/test_private_api.py``), which is wrapped: one call and one test of
the result per statement when a row is found (the statement and the Session come from the
result's ``raw`` CursorResult: its ExecutionContext, its Connection).  The keys are the ``AND``-ed ``column ==
value`` terms of the WHERE clause on the class's own table, with the values of the
execution that runs (not of the statement the engine's cache compiled first for that
shape).  ``Session.get()`` of a missing primary key, and any lookup whose keys a unique key
covers, is no check worth noting (an insert with those values is rejected by the database):
nothing is kept for it.  The insert is the flush's ``after_insert`` (:mod:`.events`); its site
is the line that made the flush happen.
"""
from __future__ import annotations

from typing import Any

from sqlalchemy import inspect as sa_inspect
from sqlalchemy.engine import result as sa_result
from sqlalchemy.sql import functions, operators
from sqlalchemy.sql.elements import BinaryExpression, BindParameter, BooleanClauseList
from sqlalchemy.sql.schema import Column, Table, UniqueConstraint
from sqlalchemy.sql.selectable import AliasedReturnsRows, Exists, Select

from .. import check_then_act, checker, limits
from ..context import current_state
from ..config import settings
from ..report import StompingError
from ..sites import user_frame, user_site
from . import events

_original = sa_result.ResultInternal._only_one_row
_own = "_only_one_row" in sa_result.ResultInternal.__dict__  # SQLAlchemy 2.1 inherits it (compiled)
_Row = sa_result.Row


def _only_one_row(self: Any, raise_for_second_row: bool, raise_for_none: bool, scalar: bool) -> Any:
    """What still calls ``_only_one_row`` by name (``AsyncResult``'s accessors, a subclass's own):
    one call and a type test when a row is found, so the parameters are spelled out (no ``**kwargs``).
    The public accessors of ``Result``, ``ScalarResult`` and ``MappingResult`` are replaced
    whole instead (:data:`ONE_ROW_ACCESSORS`): no call of their own."""
    row = _original(self, raise_for_second_row, raise_for_none, scalar)
    if type(row) in _MAYBE_CHECK and settings.enabled and current_state()[0] is not None:
        _note_check(self, row)
    return row


def _note_check(result: Any, row: Any) -> None:
    """:func:`_check`, guarded: the checker's own failure is logged, the request goes on."""
    try:
        _check(result, row)
    except StompingError:
        raise
    except Exception:
        checker.log.exception("txnsafety: internal error while noting a check (the request goes on)")


#: ``(class, accessor, raise_for_second_row, raise_for_none, scalar)``: the public one-row accessors
#: whose whole body is ``return self._only_one_row(...)`` with these arguments (pinned by
#: ``tests/sqlalchemy/test_private_api.py``).  Each is replaced by :func:`_one_row_accessor`'s
#: function, which calls the original ``_only_one_row`` itself: ``Session.get()`` (``ScalarResult.one``),
#: ``first()``, ``scalar()``... pay no Python call for the check, where a wrapper under the
#: accessor was one more call per statement, eleven in the ``session.get()`` request.
ONE_ROW_ACCESSORS: tuple[tuple[type, str, bool, bool, bool], ...] = (
    (sa_result.Result, "first", False, False, False),
    (sa_result.Result, "one_or_none", True, False, False),
    (sa_result.Result, "one", True, True, False),
    (sa_result.Result, "scalar", False, False, True),
    (sa_result.Result, "scalar_one", True, True, True),
    (sa_result.Result, "scalar_one_or_none", True, False, True),
    (sa_result.ScalarResult, "first", False, False, False),
    (sa_result.ScalarResult, "one_or_none", True, False, False),
    (sa_result.ScalarResult, "one", True, True, False),
    (sa_result.MappingResult, "first", False, False, False),
    (sa_result.MappingResult, "one_or_none", True, False, False),
    (sa_result.MappingResult, "one", True, True, False),
)
#: The accessors as SQLAlchemy defines them, put back by :func:`_uninstall`.
_original_accessors = {(cls, name): cls.__dict__[name] for cls, name, *_ in ONE_ROW_ACCESSORS}


def _one_row_accessor(cls: type, name: str, raise_for_second_row: bool, raise_for_none: bool,
                      scalar: bool) -> Any:
    """``cls.name`` as SQLAlchemy writes it (``return self._only_one_row(...)``), with the check's
    type test inline (:func:`_only_one_row`'s, no call more than SQLAlchemy's own)."""
    def accessor(self: Any) -> Any:
        row = _original(self, raise_for_second_row, raise_for_none, scalar)
        if type(row) in _MAYBE_CHECK and settings.enabled and current_state()[0] is not None:
            _note_check(self, row)
        return row
    original = _original_accessors[cls, name]
    accessor.__name__, accessor.__qualname__, accessor.__doc__ = name, original.__qualname__, original.__doc__
    accessor.__wrapped__ = original  # type: ignore[attr-defined]
    return accessor


_accessors = {(cls, name): _one_row_accessor(cls, name, *args) for cls, name, *args in ONE_ROW_ACCESSORS}


#: The types of what a check returns: None (no row), False (``exists()``), a count, or a one-column
#: Row of one of those.  A mapped object (``Session.get()``, ``first()`` that found its row), the
#: common case by far, fails one set look-up and costs nothing more.
_MAYBE_CHECK = frozenset({type(None), bool, int, _Row})


def _check(result: Any, row: Any) -> None:
    if type(row) is _Row:
        if len(row) != 1:
            return
        row = row[0]
    if row is not None and row is not False and type(row) is not int:
        return
    real = getattr(result, "_real_result", None) or result  # ScalarResult and the like
    cursor = getattr(real, "raw", None) or real  # an ORM result keeps the CursorResult it came from
    ctx = getattr(cursor, "context", None)       # the ExecutionContext: statement and connection
    # the statement this execution runs, with its own bound values; not ``ctx.compiled.statement``,
    # the one the engine's statement cache compiled first for this shape (issue 34)
    statement = getattr(ctx, "invoked_statement", None)
    ref = getattr(getattr(ctx, "root_connection", None), "__dict__", {}).get(events._CONN_KEY)
    state = ref() if ref is not None else None  # the Session whose transaction runs on it
    if state is None or statement is None:
        return  # not a Session the checker instruments
    try:
        described = statement.column_descriptions[0]
    except Exception:
        return
    expr = described.get("expr")
    if row is None:
        model, where, kind = described.get("entity"), statement.whereclause, "found no row"
    elif row is False and isinstance(expr, Exists):
        inner = expr.element.element
        model, where, kind = _class_of(inner), inner.whereclause, "exists() false"
    elif type(row) is int and isinstance(expr, functions.count):
        limit = row != 0
        if not (limits.compared_with_limit(user_frame(1)) if limit else limits.tested(user_frame(1))):
            return  # a count shown, asserted or passed on: no check
        model = described.get("entity") or _class_of(statement)
        where = statement.whereclause
        if model is None:  # Query.count(): SELECT count(*) FROM (the query's SELECT of its class)
            inner = _counted_select(statement)
            if inner is not None:
                model, where = _class_of(inner), inner.whereclause
        kind = "count() under a limit" if limit else "count() found none"
    else:
        return
    if not isinstance(model, type) or where is None or checker.write_policy(model) is None:
        return
    keys = _keys(model, where, ctx)
    if keys and not _unique_within(model, keys):
        scope = current_state()[0]
        txn = state.txn
        if txn is not None and _sqlite_legacy_mode(ctx.root_connection):
            txn = None  # the check's SELECT runs before any BEGIN of the request's: nothing serializes the pair
        check_then_act.note_lookup(scope, model, keys, kind, txn, limit=type(row) is int and row != 0)


def _unique_within(model: type, keys: dict[str, Any]) -> bool:
    """Whether a unique key of ``model`` lies within the lookup's keys (a primary-key lookup, a
    ``unique=True`` column...): the database rejects a second insert of those values, so the
    lookup is no check worth keeping (:func:`check_then_act.note_insert` would dismiss the pair
    anyway; a count's too: the unique key rejects the insert itself)."""
    return any(u <= keys.keys() for u in unique_keys(model))


def _sqlite_legacy_mode(connection: Any) -> bool:
    """Whether ``connection`` is SQLite through the driver's legacy transaction mode (pysqlite's and
    aiosqlite's default: ``isolation_level`` not None, no ``autocommit=False``).

    There the driver sends BEGIN only before an INSERT/UPDATE/DELETE, so a request's checks (SELECTs)
    run outside any transaction of its own, whatever the connection is in when the Session begins:
    a Session joined to a test's outer transaction, or a connection shared with a Session that wrote
    already, is in a transaction the driver began for someone else's write, and the isolation verdict
    taken then ("SQLite SERIALIZABLE") does not describe the request in production.  Checks only: a
    lookup that found nothing is the rare path, the common statement never comes here.
    """
    if connection.dialect.name != "sqlite":
        return False
    pooled = connection.connection
    for candidate in (pooled.dbapi_connection, getattr(pooled, "driver_connection", None)):
        autocommit = getattr(candidate, "autocommit", None)  # Python 3.12: True/False, or -1 (legacy)
        if isinstance(autocommit, bool):
            return False  # autocommit (no transaction anyway) or real transactions (PEP 249 mode)
        if candidate is not None and hasattr(candidate, "isolation_level"):
            return candidate.isolation_level is not None  # None: driver autocommit, BEGIN sent by the app
    return False


def _counted_select(statement: Any) -> Any:
    """The SELECT a legacy ``Query.count()`` wraps in ``SELECT count(*) FROM (...)``, or None."""
    try:
        froms = statement.get_final_froms()
    except Exception:
        return None
    if len(froms) != 1:
        return None
    inner = froms[0]
    while isinstance(inner, AliasedReturnsRows):  # an alias of the query's subquery
        inner = inner.element
    return inner if isinstance(inner, Select) else None


def _class_of(select: Any) -> Any:
    """The mapped class a SELECT of one table reads: the class it names (its entity, or the
    ``select_from(Model)`` its FROM carries), else the class that maps the table (with single-table
    inheritance, the base of the classes sharing it); None when nothing says which."""
    try:
        described = select.column_descriptions[0].get("entity")
    except Exception:  # a Core construct (exists().where(...)) has no ORM descriptions
        described = None
    if isinstance(described, type):
        return described
    try:
        froms = select.get_final_froms()
    except Exception:
        return None
    if len(froms) != 1 or not isinstance(froms[0], Table):
        return None
    named = getattr(froms[0], "_annotations", {}).get("parententity")
    if named is not None and isinstance(getattr(named, "class_", None), type):
        return named.class_
    return _classes_by_table().get(froms[0])


_by_table: dict[Any, type | None] = {}
_mappers_seen = [0]


def _classes_by_table() -> dict[Any, type | None]:
    """Table -> the class that maps it, rebuilt when mappers were added.  Several classes on one
    table (single-table inheritance) give the base one: the mapper that owns the table
    (``Mapper.single`` false) and that the others inherit from, whatever order the registry
    keeps them in; None when unrelated classes share a table (no guess)."""
    from sqlalchemy.orm import mapperlib
    mappers = [m for registry in mapperlib._all_registries() for m in registry.mappers]
    if len(mappers) != _mappers_seen[0]:
        owners: dict[Any, list[Any]] = {}
        for mapper in mappers:
            if not mapper.single:
                owners.setdefault(mapper.local_table, []).append(mapper)
        _by_table.clear()
        for table, candidates in owners.items():
            bases = [m for m in candidates if all(other.isa(m) for other in candidates)]
            _by_table[table] = bases[0].class_ if bases else None
        _mappers_seen[0] = len(mappers)
    return _by_table


def _keys(model: type, where: Any, ctx: Any) -> dict[str, Any]:
    """``{attribute key: value}`` of the ``column == value`` terms AND-ed in ``where``, the
    statement ``ctx`` runs (a ``bindparam()`` given its value at execution: from ``ctx``'s
    parameters)."""
    mapper = sa_inspect(model)
    tables = set(mapper.tables)
    terms = where.clauses if isinstance(where, BooleanClauseList) and where.operator is operators.and_ else [where]
    keys: dict[str, Any] = {}
    for term in terms:
        if not isinstance(term, BinaryExpression) or term.operator is not operators.eq:
            continue
        left, right = term.left, term.right
        if isinstance(left, BindParameter) and isinstance(right, Column):
            left, right = right, left
        if not isinstance(left, Column) or left.table not in tables or not isinstance(right, BindParameter):
            continue
        try:
            prop = mapper.get_property_by_column(left)
        except Exception:
            continue
        keys[prop.key] = _bound_value(right, ctx)
    return keys


def _bound_value(bind: BindParameter[Any], ctx: Any) -> Any:
    """The value ``bind`` has in this execution: its own, or the execution's parameter of its name
    (``bindparam("email")`` with ``{"email": ...}`` passed to ``execute()``)."""
    if bind.value is not None or bind.callable is not None:
        return bind.effective_value
    parameters = getattr(ctx, "compiled_parameters", None)
    return parameters[0].get(bind.key) if parameters else None


# -- the insert ------------------------------------------------------------------------------

_unique: dict[type, tuple[frozenset[str], ...]] = {}


def unique_keys(cls: type) -> tuple[frozenset[str], ...]:
    """The class's unique column sets (attribute keys): primary keys, unique constraints
    (``unique=True`` makes one) and unique indexes of its tables; cached per class."""
    keys = _unique.get(cls)
    if keys is None:
        mapper = sa_inspect(cls)
        found: list[frozenset[str]] = []

        def attrs(columns: Any) -> frozenset[str]:
            names = set()
            for column in columns:
                try:
                    names.add(mapper.get_property_by_column(column).key)
                except Exception:
                    names.add(column.key)
            return frozenset(names)

        for table in mapper.tables:
            found.append(attrs(table.primary_key.columns))
            for constraint in table.constraints:
                if isinstance(constraint, UniqueConstraint):
                    found.append(attrs(constraint.columns))
            for index in table.indexes:
                if index.unique:
                    found.append(attrs(index.columns))
            for column in table.columns:
                if column.unique:
                    found.append(attrs([column]))
        keys = _unique[cls] = tuple(u for u in found if u)
    return keys


def inserted(scope: Any, state: Any, cls: type, txn: Any, key: Any) -> None:
    """The flush inserts ``state``'s row: the act of a check-then-act? (``scope.lookups`` is set).

    A check of the class or of a class it inherits from: with single-table inheritance an
    ``exists()`` on the shared table is a check of its base class, and a row of a subclass is a
    row of it."""
    lookups = scope.lookups
    for checked in cls.__mro__:
        if checked in lookups:
            check_then_act.note_insert(scope, checked, state.dict, unique_keys(cls), txn, key,
                                       checker.model_name(cls), lambda: (user_site(1), False))


def _install() -> None:
    sa_result.ResultInternal._only_one_row = _only_one_row  # type: ignore[method-assign]
    for (cls, name), accessor in _accessors.items():
        setattr(cls, name, accessor)


def _uninstall() -> None:
    if _own:
        sa_result.ResultInternal._only_one_row = _original  # type: ignore[method-assign]
    elif "_only_one_row" in vars(sa_result.ResultInternal):
        del sa_result.ResultInternal._only_one_row
    for (cls, name), original in _original_accessors.items():
        setattr(cls, name, original)


if (_install, _uninstall) not in events._PATCHES:
    events._PATCHES.append((_install, _uninstall))
    events._INSERT_HOOKS.append(inserted)
    if events._installed:
        _install()
