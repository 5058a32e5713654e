"""Which transaction a Django read or write happens in, and whether it prevents lost updates.

Django has no "transaction begun" signal.  Its state is on the connection:
``in_atomic_block`` and ``atomic_blocks`` (the stack of ``Atomic`` objects; the
TestCase's own blocks are tagged ``_from_testcase``).  The checker's identity of
a root transaction is minted **lazily** at the first read or write inside it and
cached on the connection together with the root ``Atomic`` it belongs to.

One wrinkle makes a tiny hook necessary: ``@transaction.atomic`` used as a
decorator reuses *one* ``Atomic`` object for every call, so two consecutive root
transactions opened by the same decorated function would look identical.  The
wrapped ``Atomic.__enter__`` (see :mod:`txnsafety.django.hooks`) only drops the
cached identity when a new root begins; it does no other work.

Savepoints (nested ``atomic()``) share their root: for stomping purposes they are
the same database transaction.  ``TestCase``'s atomics are skipped, so a test sees
what production would: code that is not inside its own ``atomic()`` is outside
any transaction.

Private Django attributes read here (each pinned by tests/django/test_private_api.py):
``BaseDatabaseWrapper.in_atomic_block``, ``BaseDatabaseWrapper.atomic_blocks`` and
``Atomic._from_testcase``.
"""
from __future__ import annotations

import logging
import threading
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections

from ..context import Transaction, new_transaction

log = logging.getLogger("txnsafety")

#: Attribute on a Django DatabaseWrapper: (root Atomic or None, Transaction).
ROOT_ATTR = "_txnsafety_root"

#: alias -> (isolation name, prevents lost update); cleared when settings change.
_verdicts: dict[str, tuple[str, bool]] = {}

#: alias -> isolation name forced by settings.TXNSAFETY["ISOLATION"].
_overrides: dict[str, str] = {}

_PREVENTING = {"serializable", "repeatable read"}


def set_isolation_overrides(overrides: dict[str, str] | None) -> None:
    """``TXNSAFETY["ISOLATION"]``: ``{alias: "serializable" | "repeatable read" | ...}``.

    For databases whose default isolation is set on the server (``ALTER DATABASE
    ... SET default_transaction_isolation``) where Django's settings cannot see it.
    """
    _overrides.clear()
    for alias, level in (overrides or {}).items():
        _overrides[str(alias)] = str(level).lower().replace("_", " ")
    _verdicts.clear()


def forget_verdicts() -> None:
    """DATABASES changed: recompute isolation verdicts and look connections up again."""
    _verdicts.clear()
    _generation[0] += 1


def isolation_verdict(alias: str) -> tuple[str, bool]:
    """``(isolation level, prevents lost update)`` of the database ``alias``.

    * SQLite: a writer takes the database lock and a stale reader cannot upgrade
      (``database is locked`` / ``SQLITE_BUSY_SNAPSHOT``): lost updates cannot happen.
    * PostgreSQL: ``OPTIONS["isolation_level"]`` (Django's default, READ
      COMMITTED, allows lost updates; REPEATABLE READ and SERIALIZABLE raise a
      serialization failure instead).
    * MySQL/MariaDB: only SERIALIZABLE prevents them (Django's default is READ
      COMMITTED; InnoDB REPEATABLE READ also loses updates).  This is what the
      settings say; a live connection is judged by :func:`connection_verdict`.
    * Anything else (Oracle, third-party backends): assumed not to, unless
      ``TXNSAFETY["ISOLATION"]`` says otherwise.
    """
    verdict = _verdicts.get(alias)
    if verdict is None:
        verdict = _verdicts[alias] = _compute_verdict(alias)
    return verdict


def _compute_verdict(alias: str) -> tuple[str, bool]:
    override = _overrides.get(alias)
    if override is not None:
        return override, override in _PREVENTING
    settings_dict = connections[alias].settings_dict
    engine = settings_dict.get("ENGINE", "")
    options = settings_dict.get("OPTIONS") or {}
    level = options.get("isolation_level")
    if "sqlite3" in engine:
        return "serializable", True
    if "postgresql" in engine or "postgis" in engine:
        name = _postgres_level_name(level)
        return name, name in _PREVENTING
    if "mysql" in engine:
        # Django sets "read committed" unless told otherwise; None leaves the server's
        # own default, InnoDB's REPEATABLE READ unless the server was configured
        name = str(options.get("isolation_level", "read committed") or "repeatable read").lower()
        return name, name == "serializable"
    name = str(level).lower() if level else "read committed"
    return name, name == "serializable"


#: Attribute on a MySQL DatabaseWrapper: (the DBAPI connection judged, its verdict).
MYSQL_VERDICT_ATTR = "_txnsafety_mysql_verdict"

#: The level named for MariaDB's REPEATABLE READ with ``innodb_snapshot_isolation`` on.
MARIADB_SNAPSHOT = "repeatable read (innodb_snapshot_isolation)"


def connection_verdict(conn: Any) -> tuple[str, bool]:
    """``(isolation level, prevents lost update)`` of the live connection ``conn``.

    ``TXNSAFETY["ISOLATION"]`` wins, then, for MySQL and MariaDB, the connection
    itself: the level Django set on it (``OPTIONS["isolation_level"]``, "read
    committed" by default), or the server's own when Django set none (None), and on
    MariaDB at REPEATABLE READ the ``innodb_snapshot_isolation`` variable, with which
    a write to a row changed since the snapshot fails instead of overwriting it (as
    on PostgreSQL).  Asked once per DBAPI connection, and only what the settings
    cannot tell.  Other databases: the settings (:func:`isolation_verdict`).
    """
    if conn.vendor != "mysql" or conn.alias in _overrides:
        return isolation_verdict(conn.alias)
    dbapi = conn.connection
    cached = getattr(conn, MYSQL_VERDICT_ATTR, None)
    if cached is not None and cached[0] is dbapi:
        return cached[1]
    try:
        verdict = _ask_mysql(conn, dbapi)
    except Exception:  # a server that cannot say: what the settings say
        log.exception("txnsafety: could not read the isolation of database %r; judging it from its settings",
                      conn.alias)
        verdict = isolation_verdict(conn.alias)
    setattr(conn, MYSQL_VERDICT_ATTR, (dbapi, verdict))
    return verdict


def _ask_mysql(conn: Any, dbapi: Any) -> tuple[str, bool]:
    level = getattr(conn, "isolation_level", None)  # what Django SET on this connection, if anything
    if not level:
        level = _server_variable(dbapi, "transaction_isolation", "tx_isolation")  # MySQL 8, MariaDB < 11.1
    name = str(level).lower().replace("-", " ").replace("_", " ")
    if name == "repeatable read" and conn.mysql_is_mariadb:
        if str(_server_variable(dbapi, "innodb_snapshot_isolation")).upper() in ("1", "ON"):
            return MARIADB_SNAPSHOT, True
    return name, name == "serializable"


def _server_variable(dbapi: Any, *names: str) -> Any:
    """The session value of the first of ``names`` the server knows (None: none of them)."""
    for name in names:
        cursor = dbapi.cursor()
        try:
            cursor.execute(f"SELECT @@SESSION.{name}")
            row = cursor.fetchone()
            return row[0] if row else None
        except Exception:  # unknown variable on this server (an error ends no MySQL transaction)
            continue
        finally:
            cursor.close()
    return None


def _postgres_level_name(level: Any) -> str:
    if level is None:
        return "read committed"
    try:
        # Django's own normalisation (psycopg 3 IsolationLevel, or an IntEnum of
        # psycopg2's constants): the same value Django itself accepts.
        from django.db.backends.postgresql.psycopg_any import IsolationLevel
        member = IsolationLevel(level)
        return member.name.lower().replace("_", " ")
    except Exception:  # driver missing or unknown value: Django will complain itself
        return str(level).lower().replace("_", " ")


_thread = threading.local()
_generation = [0]


def _connection(alias: str) -> Any:
    """``connections[alias]``, cached per thread.

    Django keeps one connection wrapper per thread and alias (``Local(thread_critical=True)``
    is thread-local storage) and the lookup through asgiref's Local is the costliest step of
    a read's check.  ``forget_verdicts()`` (DATABASES changed) invalidates every thread's cache.
    """
    try:  # the hot path: this thread has looked ``alias`` up since DATABASES last changed
        generation, by_alias = _thread.connections
        if generation == _generation[0]:
            return by_alias[alias]
    except (AttributeError, KeyError):
        pass
    return _look_up(alias)


def _look_up(alias: str) -> Any:
    """Fill this thread's cache for :func:`_connection` (and start it afresh when stale)."""
    cache = getattr(_thread, "connections", None)
    if cache is None or cache[0] != _generation[0]:
        cache = _thread.connections = (_generation[0], {})
    conn = cache[1][alias] = connections[alias]
    return conn


def transaction_for(alias: str | None) -> Transaction | None:
    """The checker's :class:`Transaction` for the root atomic block on ``alias``, or None.

    None when the connection is in autocommit, or only the TestCase's own
    atomics are open.  Manual ``set_autocommit(False)`` transactions (no atomic
    block) count as no transaction: Django discourages them and there is no way to
    tell where they begin.
    """
    alias = alias or DEFAULT_DB_ALIAS
    try:  # _connection's hot path, inline: every statement and every save asks
        generation, by_alias = _thread.connections
        conn = by_alias[alias] if generation == _generation[0] else None
    except (AttributeError, KeyError):
        conn = None
    if conn is None:
        conn = _look_up(alias)
    if not conn.in_atomic_block:
        return None
    for block in conn.atomic_blocks:
        if not block._from_testcase:
            break
    else:
        return None
    cached = getattr(conn, ROOT_ATTR, None)
    if cached is not None and cached[0] is block:
        return cached[1]
    isolation, prevents = connection_verdict(conn)
    txn = new_transaction(isolation=isolation, prevents_lost_update=prevents, database=conn.alias,
                          label=f"atomic({conn.alias})")
    setattr(conn, ROOT_ATTR, (block, txn))
    return txn


def new_root_began(conn: Any) -> None:
    """A root atomic block was just entered on ``conn``: forget the previous identity."""
    if getattr(conn, ROOT_ATTR, None) is not None:
        setattr(conn, ROOT_ATTR, None)
