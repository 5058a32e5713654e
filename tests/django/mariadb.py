"""The MariaDB databases of the Django tests: one database on the server, four aliases.

Each alias is a way a Django project meets MariaDB's isolation:

* ``mysql``: Django's default, READ COMMITTED (Django sets it on every connection);
* ``mysql_rr``: ``isolation_level: None``: Django sets nothing, the server's default
  applies, InnoDB's REPEATABLE READ (the checker asks the connection);
* ``mysql_ser``: SERIALIZABLE;
* ``mysql_snap``: REPEATABLE READ with MariaDB's ``innodb_snapshot_isolation`` set on at
  connect (``init_command``), which makes a stale write fail as on PostgreSQL.

Only when mysqlclient is installed: Django imports the driver as soon as anything
touches an alias (``connections.all()``), and the rest of the suite must run without it.
"""
from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

MYSQL_ALIASES = ("mysql", "mysql_rr", "mysql_ser", "mysql_snap")


def driver_installed() -> bool:
    try:
        import MySQLdb  # noqa: F401
    except ImportError:
        return False
    return True


def mysql_databases(url: str, name: str) -> dict[str, Any]:
    if not driver_installed():
        return {}
    parts = urlsplit(url)

    def alias(**options: Any) -> dict[str, Any]:
        return {"ENGINE": "django.db.backends.mysql", "NAME": name, "USER": parts.username or "",
                "PASSWORD": parts.password or "", "HOST": parts.hostname or "127.0.0.1",
                "PORT": str(parts.port or 3306), "OPTIONS": options, "CONN_MAX_AGE": 0}
    return {
        "mysql": alias(),
        "mysql_rr": alias(isolation_level=None),
        "mysql_ser": alias(isolation_level="serializable"),
        "mysql_snap": alias(isolation_level="repeatable read",
                            init_command="SET SESSION innodb_snapshot_isolation=ON"),
    }


def create_database(url: str, name: str) -> None:
    import MySQLdb
    parts = urlsplit(url)
    conn = MySQLdb.connect(host=parts.hostname or "127.0.0.1", port=parts.port or 3306,
                           user=parts.username or "", password=parts.password or "")
    try:
        conn.cursor().execute(f"CREATE DATABASE IF NOT EXISTS `{name}` CHARACTER SET utf8mb4")
    finally:
        conn.close()
