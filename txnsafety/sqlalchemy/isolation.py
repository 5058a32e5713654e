"""Does a SQLAlchemy connection's transaction prevent lost updates?

The verdict is computed once per root transaction (in ``after_begin``), from the
connection the Session begins:

* ``AUTOCOMMIT`` (engine-, connection- or session-level) means **no transaction**:
  every statement commits on its own, a ``FOR UPDATE`` lock ends with the statement.
* PostgreSQL ``REPEATABLE READ`` / ``SERIALIZABLE``, SQL Server ``SNAPSHOT`` /
  ``SERIALIZABLE``, and ``SERIALIZABLE`` anywhere prevent lost updates (the
  database raises a serialization error instead); ``READ COMMITTED`` and MySQL's
  ``REPEATABLE READ`` do not (Hermitage, P4).
* MariaDB's ``REPEATABLE READ`` loses updates as MySQL's does, unless the
  connection has ``innodb_snapshot_isolation`` on (MariaDB 10.6.18+, the default
  from 11.6): a write to a row changed since the transaction's snapshot then fails
  ("Record has changed since last read") instead of overwriting it, as on PostgreSQL.
  The variable is asked of the connection with its level (unknown: off).
* SQLite serializes writers, **but only when the transaction really began**.  The
  ``sqlite3`` driver in its default (legacy) mode sends no ``BEGIN`` until the
  first INSERT/UPDATE/DELETE, so the SELECTs of a Session run outside any
  database transaction and two requests can both read, both write, and lose an
  update.  We detect that by asking the driver whether it is in a transaction
  right after the Session began one (``sqlite3.Connection.in_transaction``).
  :func:`sqlite_transactions` applies SQLAlchemy's documented recipe (driver
  autocommit + our own ``BEGIN``), after which SQLite is truly serializable.

The actual isolation level is asked of the database once per pooled DBAPI
connection (``Connection.get_isolation_level()`` is a live query) and cached in
the pool record's ``info``; a per-connection ``isolation_level`` execution option
wins without a query.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import event

__all__ = ["Verdict", "verdict_for", "sqlite_transactions"]

_LEVEL_KEY = "txnsafety.isolation_level"
_SNAPSHOT_KEY = "txnsafety.innodb_snapshot_isolation"

#: The verdict's level for MariaDB's REPEATABLE READ with ``innodb_snapshot_isolation`` on.
MARIADB_SNAPSHOT = "REPEATABLE READ (innodb_snapshot_isolation)"

#: Isolation levels that prevent lost updates, per dialect name.
_PREVENTING: dict[str, frozenset[str]] = {
    "postgresql": frozenset({"REPEATABLE READ", "SERIALIZABLE"}),
    "mssql": frozenset({"SNAPSHOT", "SERIALIZABLE"}),
    "mysql": frozenset({"SERIALIZABLE"}),
    "mariadb": frozenset({"SERIALIZABLE"}),
    "oracle": frozenset({"SERIALIZABLE"}),
}
_DEFAULT_PREVENTING = frozenset({"SERIALIZABLE"})

#: Dialects whose compiler renders nothing for ``with_for_update()``.
IGNORES_FOR_UPDATE = frozenset({"sqlite"})

SQLITE_DEFERRED = ("SQLite with deferred BEGIN (the sqlite3 driver's legacy mode sends no BEGIN before "
                   "the first write, so reads run outside the transaction)")


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a connection's transaction protects."""

    transactional: bool          # False: AUTOCOMMIT, no transaction holds anything
    isolation: str
    prevents_lost_update: bool
    dialect: str
    database: str


def _normalize(level: Any) -> str:
    return str(level).upper().replace("_", " ").strip()


def _autocommit(connection: Any) -> bool:
    dbapi = connection.connection.dbapi_connection
    detect = getattr(connection.dialect, "detect_autocommit_setting", None)
    if detect is not None:
        try:
            return bool(detect(dbapi))
        except NotImplementedError:
            pass
    flag = getattr(dbapi, "autocommit", None)
    return flag if isinstance(flag, bool) else False


def _sqlite_driver_autocommit(connection: Any) -> bool:
    pooled = connection.connection
    for candidate in (pooled.dbapi_connection, getattr(pooled, "driver_connection", None)):
        if candidate is not None and hasattr(candidate, "isolation_level"):
            return candidate.isolation_level is None
    return False


def _sqlite_in_transaction(connection: Any) -> bool | None:
    """The driver's own answer: the DBAPI connection's (``sqlite3``), else the driver's under an
    adapter (``aiosqlite``); ``driver_connection`` is asked only then (a property: two frames)."""
    pooled = connection.connection
    flag = getattr(pooled.dbapi_connection, "in_transaction", None)
    if isinstance(flag, bool):
        return flag
    flag = getattr(getattr(pooled, "driver_connection", None), "in_transaction", None)
    return flag if isinstance(flag, bool) else None


def _actual_level(connection: Any) -> str:
    info = connection.connection.info
    level = info.get(_LEVEL_KEY)
    if level is None:
        try:
            level = _normalize(connection.get_isolation_level())
        except Exception:  # a dialect that cannot tell: assume its default
            level = _normalize(connection.default_isolation_level or "READ COMMITTED")
        info[_LEVEL_KEY] = level
    return level


def _mariadb_snapshot(connection: Any) -> bool:
    """Whether this MariaDB connection has ``innodb_snapshot_isolation`` on (cached per
    pooled connection, like its level).  A server without the variable: off."""
    info = connection.connection.info
    on = info.get(_SNAPSHOT_KEY)
    if on is None:
        try:
            cursor = connection.connection.dbapi_connection.cursor()
            try:
                cursor.execute("SELECT @@SESSION.innodb_snapshot_isolation")
                row = cursor.fetchone()
            finally:
                cursor.close()
            on = bool(row and int(row[0]))
        except Exception:  # MariaDB before 10.6.18 (an error does not end a MySQL transaction)
            on = False
        info[_SNAPSHOT_KEY] = on
    return on


_VERDICTS_KEY = "_txnsafety_verdicts"


def _verdict(connection: Any, transactional: bool, isolation: str, prevents_lost_update: bool) -> Verdict:
    """The (immutable, shared) Verdict of this engine for these facts.

    Computed once per engine and outcome: this runs at every transaction begin, and
    building the frozen dataclass and the ``database`` label each time is most of it.
    """
    engine = connection.engine
    verdicts = engine.__dict__.get(_VERDICTS_KEY)
    if verdicts is None:
        verdicts = engine.__dict__[_VERDICTS_KEY] = {}
    key = (transactional, isolation, prevents_lost_update)
    verdict = verdicts.get(key)
    if verdict is None:
        dialect = connection.dialect.name
        database = f"{dialect}:{engine.url.database or ''}"
        verdict = verdicts[key] = Verdict(transactional, isolation, prevents_lost_update, dialect, database)
    return verdict


def verdict_for(connection: Any) -> Verdict:
    """The verdict for the transaction ``connection`` has just begun."""
    dialect = connection.dialect.name
    option = connection.get_execution_options().get("isolation_level")
    option = _normalize(option) if option is not None else None
    if option == "AUTOCOMMIT":
        return _verdict(connection, False, "AUTOCOMMIT", False)
    if dialect == "sqlite":
        # The sqlite3 driver's own flags do not tell "autocommit" from "our BEGIN
        # recipe": ask whether a transaction is really open now, after BEGIN.
        if _sqlite_in_transaction(connection) is not False:
            return _verdict(connection, True, "SQLite SERIALIZABLE", True)
        if _sqlite_driver_autocommit(connection):
            return _verdict(connection, False, "AUTOCOMMIT", False)
        return _verdict(connection, True, SQLITE_DEFERRED, False)
    if _autocommit(connection):
        return _verdict(connection, False, "AUTOCOMMIT", False)
    level = option or _actual_level(connection)
    mariadb = getattr(connection.dialect, "is_mariadb", False)
    if level == "REPEATABLE READ" and mariadb and _mariadb_snapshot(connection):
        return _verdict(connection, True, MARIADB_SNAPSHOT, True)
    return _verdict(connection, True, level, level in _PREVENTING.get(dialect, _DEFAULT_PREVENTING))


def sqlite_transactions(engine: Any, begin: str = "BEGIN") -> Any:
    """Make a SQLite engine's Session transactions real database transactions.

    SQLAlchemy's documented recipe for the ``sqlite3`` / ``aiosqlite`` drivers: put the
    driver in autocommit mode and emit ``BEGIN`` (or ``BEGIN IMMEDIATE``) ourselves
    when SQLAlchemy begins a transaction.  Without it the SELECTs of a transaction
    run before the driver's implicit BEGIN and a read-modify-write can lose an
    update (TXN109).  Accepts an ``Engine`` or an ``AsyncEngine``; returns it.
    """
    sync_engine = getattr(engine, "sync_engine", engine)
    if sync_engine.dialect.name != "sqlite":
        raise ValueError(f"sqlite_transactions() needs a SQLite engine, not {sync_engine.dialect.name}")

    @event.listens_for(sync_engine, "connect")
    def _driver_autocommit(dbapi_connection: Any, record: Any) -> None:
        dbapi_connection.isolation_level = None

    @event.listens_for(sync_engine, "begin")
    def _begin(conn: Any) -> None:
        if conn.get_execution_options().get("isolation_level") != "AUTOCOMMIT":
            conn.exec_driver_sql(begin)

    return engine
