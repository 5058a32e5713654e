"""Which Redis a ``redis://`` family URL names: one server, a Sentinel-watched master, a Cluster.

Why a module of its own: the lock backend speaks the same scripts to all three
(every key of one lock shares a hash tag, so each script touches one slot); only
the client differs.  URLs:

* ``redis://host:port/db`` (``rediss://``, ``unix://``) -- one server, as redis-py parses it;
* ``redis+sentinel://[user:pass@]host:port[,host:port...]/service[/db]`` -- the
  master that the Sentinels at those addresses name for ``service`` (redis-py's
  ``Sentinel.master_for``: a failover is followed on the next connection).
  ``sentinel_password`` in the query authenticates to the Sentinels themselves;
* ``redis+cluster://[user:pass@]host:port[,host:port...]`` -- a Redis Cluster,
  found from any of those nodes (redis-py's ``RedisCluster``).

``rediss+sentinel`` / ``rediss+cluster`` use TLS.  Default ports: 26379 for
Sentinels, 6379 otherwise.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.sentinel
import redis.cluster
import redis.sentinel

SCHEMES = ("redis", "rediss", "unix", "redis+sentinel", "rediss+sentinel", "redis+cluster", "rediss+cluster")


@dataclass(frozen=True)
class Topology:
    kind: str                                   # "single" | "sentinel" | "cluster"
    url: str                                    # the URL without our query options
    hosts: tuple[tuple[str, int], ...] = ()
    service: str = ""
    db: int = 0
    username: str | None = None
    password: str | None = None
    ssl: bool = False
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """Credentials left out: safe for logs and reports."""
        if self.kind == "single":
            parts = urlsplit(self.url)
            port = f":{parts.port}" if parts.port else ""
            return f"{parts.scheme}://{parts.hostname or ''}{port}{parts.path}"
        hosts = ",".join(f"{h}:{p}" for h, p in self.hosts)
        tail = f"/{self.service}/{self.db}" if self.kind == "sentinel" else ""
        return f"{urlsplit(self.url).scheme}://{hosts}{tail}"


def parse(url: str, extra: dict[str, str] | None = None) -> Topology:
    """The topology ``url`` names (``extra``: our own query options, e.g. sentinel_password)."""
    parts = urlsplit(url)
    scheme = parts.scheme
    if scheme not in SCHEMES:
        raise ValueError(f"txnsafety: not a Redis URL scheme: {scheme!r}")
    if "+" not in scheme:
        return Topology("single", url, extra=dict(extra or {}))
    kind = scheme.partition("+")[2]
    cred, _, hostlist = parts.netloc.rpartition("@")
    username, _, password = cred.partition(":") if cred else ("", "", "")
    default_port = 26379 if kind == "sentinel" else 6379
    hosts = []
    for item in hostlist.split(","):
        host, _, port = item.strip().rpartition(":") if ":" in item else (item.strip(), "", "")
        if not host:
            raise ValueError(f"txnsafety: no host in Redis URL part {item!r}")
        hosts.append((host, int(port) if port else default_port))
    path = [p for p in parts.path.split("/") if p]
    service, db = "", 0
    if kind == "sentinel":
        if not path:
            raise ValueError("txnsafety: a redis+sentinel URL names the service: "
                             "redis+sentinel://host:26379/mymaster[/db]")
        service = unquote(path[0])
        db = int(path[1]) if len(path) > 1 else 0
    elif path and path != ["0"]:
        raise ValueError("txnsafety: Redis Cluster has database 0 only")
    return Topology(kind, url, tuple(hosts), service, db, unquote(username) or None,
                    unquote(password) or None, scheme.startswith("rediss"), dict(extra or {}))


def _auth(t: Topology) -> dict[str, Any]:
    auth: dict[str, Any] = {}
    if t.username:
        auth["username"] = t.username
    if t.password:
        auth["password"] = t.password
    if t.ssl:
        auth["ssl"] = True
    return auth


def _sentinel_kwargs(t: Topology, options: dict[str, Any]) -> dict[str, Any]:
    kw = {k: v for k, v in options.items() if k in ("socket_timeout", "socket_connect_timeout")}
    if "sentinel_password" in t.extra:
        kw["password"] = t.extra["sentinel_password"]
    return kw


def sync_client(t: Topology, options: dict[str, Any]) -> Any:
    """A blocking redis-py client for ``t`` with ``options`` (timeouts, retry)."""
    if t.kind == "single":
        return redis.Redis.from_url(t.url, **options)
    if t.kind == "sentinel":
        sentinel = redis.sentinel.Sentinel(list(t.hosts), sentinel_kwargs=_sentinel_kwargs(t, options))
        return sentinel.master_for(t.service, db=t.db, **_auth(t), **options)
    options = {k: v for k, v in options.items() if k != "retry_on_timeout"}
    return redis.cluster.RedisCluster(startup_nodes=[redis.cluster.ClusterNode(h, p) for h, p in t.hosts],
                                      **_auth(t), **options)


def async_client(t: Topology, options: dict[str, Any]) -> Any:
    """The ``redis.asyncio`` counterpart of :func:`sync_client`."""
    if t.kind == "single":
        return redis.asyncio.Redis.from_url(t.url, **options)
    if t.kind == "sentinel":
        sentinel = redis.asyncio.sentinel.Sentinel(list(t.hosts), sentinel_kwargs=_sentinel_kwargs(t, options))
        return sentinel.master_for(t.service, db=t.db, **_auth(t), **options)
    options = {k: v for k, v in options.items() if k != "retry_on_timeout"}
    return redis.asyncio.cluster.RedisCluster(
        startup_nodes=[redis.asyncio.cluster.ClusterNode(h, p) for h, p in t.hosts], **_auth(t), **options)
