"""Vocabulary presets and configuration for the linter.

Every list here is a *default*; configuration (``[tool.txnsafety]`` in
``pyproject.toml`` or ``txn-*`` options of flake8) only ever extends it.

A configured name matches a call when the last dotted components agree and one
dotted name is a suffix of the other: ``redis.lock`` matches ``self.redis.lock(...)``
and ``txnsafety.locks.user_write_lock`` matches an imported ``user_write_lock(...)``.
A configured name without a dot matches any call whose last component is that name.
"""
from __future__ import annotations

import builtins
import dataclasses
import os
import sys
from typing import Any, Iterable

from ..rules.registry import RULES, Default

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

#: Codes the linter can report, and those computed only when enabled (``enable =
#: ["TXN109"]``): both from the rule registry.
LINTER_CODES = tuple(RULES)
OPT_IN_CODES = frozenset(code for code, rule in RULES.items() if rule.default is Default.OPT_IN)

WEAK_ISOLATION = {"read committed", "read uncommitted", "mysql repeatable read"}
STRONG_ISOLATION = {"serializable", "repeatable read", "snapshot"}

# --- presets -------------------------------------------------------------

#: Calls (by last name, or dotted suffix) that read an entity, beyond the ORM
#: chains the analysis recognises by shape (``M.objects.get``, ``session.get(M, k)``,
#: ``session.execute(select(M)).scalar_one()``, ``M.query.first()``, ``key.get()``...).
GETS = {
    "django": {"get_object_or_404"},
    "sqlalchemy": {"get_or_404", "first_or_404", "one_or_404"},
    "ndb": {"get_by_id", "get_by_key_name", "get_or_insert"},
    "txnsafety": {"fetch_under_lock"},
}
#: Calls that write the entity they are called on (``x.save()``) or are given.
PUTS = {
    "django": {"save"},
    "sqlalchemy": set(),
    "ndb": {"put", "put_async", "put_multi", "put_multi_async"},
    "txnsafety": set(),
}
#: ``with`` / decorator calls that are transactions.
TRANSACTIONS = {
    "django": {"transaction.atomic", "atomic"},
    "sqlalchemy": {"begin", "begin_nested"},
    "ndb": {"ndb.transactional", "db.transactional", "transactional", "ndb.transactional_tasklet",
            "ndb.transaction", "db.run_in_transaction", "run_in_transaction",
            "run_in_transaction_options", "transaction_async"},
    "txnsafety": set(),
}
#: Transactions that the framework retries on conflict (side effects run twice: TXN107).
RETRYING_TRANSACTIONS = {
    "django": set(),
    "sqlalchemy": set(),
    "ndb": {"ndb.transactional", "db.transactional", "transactional", "ndb.transactional_tasklet",
            "ndb.transaction", "db.run_in_transaction", "run_in_transaction",
            "run_in_transaction_options", "transaction_async"},
    "txnsafety": set(),
}
#: ``with`` / decorator calls that are locks held across processes.
LOCKS = {
    "django": {"cache.lock", "advisory_lock"},
    "sqlalchemy": {"advisory_lock"},
    "ndb": set(),
    "txnsafety": {"user_write_lock", "global_lock", "txnsafety.locks.user_write_lock",
                  "txnsafety.locks.global_lock", "redis.lock", "lock", "redis_lock.Lock",
                  "advisory_lock", "pglock.advisory_lock"},
}
#: Non-idempotent side effects (TXN107).
SIDE_EFFECTS = {
    "django": {"send_mail", "send_mass_mail", "mail_admins", "mail_managers", "cache.set",
               "cache.add", "cache.delete", "cache.incr", "cache.decr", "cache.set_many"},
    "sqlalchemy": set(),
    "ndb": {"taskqueue.add", "deferred.defer", "memcache.set", "memcache.add", "memcache.incr",
            "memcache.delete", "mail.send_mail"},
    "txnsafety": {"delay", "apply_async", "send_task", "enqueue", "requests.post", "requests.put",
                  "requests.patch", "requests.delete", "httpx.post", "httpx.put", "httpx.patch",
                  "httpx.delete", "urlopen", "send_email", "publish"},
}
#: Lock-like calls that are process-local and protect nothing across workers.
NOT_LOCKS = {"threading.Lock", "threading.RLock", "asyncio.Lock", "multiprocessing.Lock"}

FRAMEWORKS = ("django", "sqlalchemy", "ndb", "txnsafety")

#: Import roots that select a preset.
IMPORT_ROOTS = {
    "django": "django",
    "sqlalchemy": "sqlalchemy",
    "flask_sqlalchemy": "sqlalchemy",
    "google.appengine": "ndb",
    "google.cloud.ndb": "ndb",
    "ndb": "ndb",
    "txnsafety": "txnsafety",
}


def _norm_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = value.replace("\n", ",").split(",")
    return [str(v).strip() for v in value if str(v).strip()]


@dataclasses.dataclass
class Config:
    """What the analysis needs to know beyond the source."""

    gets: set[str] = dataclasses.field(default_factory=set)
    puts: set[str] = dataclasses.field(default_factory=set)
    locks: set[str] = dataclasses.field(default_factory=set)
    transactions: set[str] = dataclasses.field(default_factory=set)
    retrying_transactions: set[str] = dataclasses.field(default_factory=set)
    side_effects: set[str] = dataclasses.field(default_factory=set)
    versioned_models: set[str] = dataclasses.field(default_factory=set)
    #: ``None``: the framework default (READ COMMITTED for Django/SQLAlchemy,
    #: serializable for App Engine).
    isolation: str | None = None
    enable: set[str] = dataclasses.field(default_factory=set)
    disable: set[str] = dataclasses.field(default_factory=set)
    #: report side effects in any transaction, not only retrying ones (TXN107).
    side_effects_in_any_transaction: bool = False
    #: force presets instead of recognising them from imports.
    frameworks: set[str] = dataclasses.field(default_factory=set)
    max_bytes: int = 2_000_000
    #: project facts, not settings: model -> unique column sets (constraints.py), filled by
    #: the analysis from the models it sees
    unique_keys: dict = dataclasses.field(default_factory=dict)
    #: manager attributes the project's models declare besides ``objects`` (``all``, ``live``)
    managers: frozenset = frozenset()
    #: model -> its relation attributes (relations.py), filled by the analysis
    relations: dict = dataclasses.field(default_factory=dict)
    #: models whose every base the project shows (constraints.py), filled by the analysis:
    #: their declared unique keys are all the keys they have
    declared_models: frozenset = frozenset()
    #: every class the project's files define with a base (models among them), filled by the
    #: analysis: a model outside it (another package's) has keys the linter cannot see
    defined_classes: frozenset = frozenset()

    KEYS = ("gets", "puts", "locks", "transactions", "retrying_transactions", "side_effects",
            "versioned_models", "isolation", "enable", "disable",
            "side_effects_in_any_transaction", "frameworks", "max_bytes")

    def update(self, mapping: dict[str, Any]) -> "Config":
        """Merge ``mapping`` (keys with ``-`` or ``_``); lists extend, scalars replace."""
        for raw_key, value in mapping.items():
            key = raw_key.replace("-", "_")
            if key.startswith("txn_"):
                key = key[4:]
            if key not in self.KEYS:
                raise ValueError(f"unknown txnsafety lint option {raw_key!r}")
            current = getattr(self, key)
            if isinstance(current, set):
                items = _norm_list(value)
                if key in ("enable", "disable"):
                    items = [i.upper() for i in items]
                current.update(items)
            elif key == "side_effects_in_any_transaction":
                self.side_effects_in_any_transaction = _truthy(value)
            elif key == "max_bytes":
                self.max_bytes = int(value)
            elif key == "isolation":
                iso = str(value).strip().lower().replace("_", " ").replace("-", " ")
                if iso not in WEAK_ISOLATION | STRONG_ISOLATION:
                    raise ValueError(f"unknown isolation level {value!r}; one of "
                                     f"{sorted(WEAK_ISOLATION | STRONG_ISOLATION)}")
                self.isolation = iso
        return self

    def code_enabled(self, code: str) -> bool:
        if code in self.disable:
            return False
        if code in OPT_IN_CODES:
            return code in self.enable
        return True


def _truthy(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def find_pyproject(start: str) -> str | None:
    path = os.path.abspath(start)
    if os.path.isfile(path):
        path = os.path.dirname(path)
    while True:
        candidate = os.path.join(path, "pyproject.toml")
        if os.path.isfile(candidate):
            return candidate
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent


def load_pyproject(path: str | None) -> dict[str, Any]:
    """The ``[tool.txnsafety]`` table (or ``[tool.txnsafety.lint]`` if present)."""
    if not path or not os.path.isfile(path):
        return {}
    with open(path, "rb") as fh:
        data = tomllib.load(fh)
    table = data.get("tool", {}).get("txnsafety", {})
    if isinstance(table.get("lint"), dict):
        table = table["lint"]
    return {k: v for k, v in table.items() if not isinstance(v, dict)}


def config_from(mapping: dict[str, Any] | None = None, pyproject: str | None = None) -> Config:
    cfg = Config()
    if pyproject:
        cfg.update(load_pyproject(pyproject))
    if mapping:
        cfg.update(mapping)
    return cfg


@dataclasses.dataclass
class Vocab:
    """The merged vocabulary for one module (presets chosen by imports + config)."""

    frameworks: frozenset[str]
    gets: frozenset[str]
    puts: frozenset[str]
    locks: frozenset[str]
    transactions: frozenset[str]
    retrying: frozenset[str]
    side_effects: frozenset[str]
    weak_isolation: bool      # Django/SQLAlchemy transactions (READ COMMITTED default)
    ndb_serializable: bool


def _union(table: dict[str, set[str]], frameworks: Iterable[str], extra: set[str]) -> frozenset[str]:
    out: set[str] = set(extra)
    for fw in frameworks:
        out |= table.get(fw, set())
    return frozenset(out)


def vocab_for(frameworks: Iterable[str], cfg: Config) -> Vocab:
    fws = set(frameworks) | set(cfg.frameworks)
    implicit = not fws - {"txnsafety"}
    if implicit:
        fws |= {"django", "sqlalchemy", "ndb"}
    fws.add("txnsafety")
    iso = cfg.isolation
    weak = True if iso is None else iso in WEAK_ISOLATION
    retrying = _union(RETRYING_TRANSACTIONS, fws, cfg.retrying_transactions)
    transactions = _union(TRANSACTIONS, fws, cfg.transactions | cfg.retrying_transactions)
    if implicit:
        # no framework imported: App Engine's names count only when spelt ``ndb.``/``db.``;
        # a project's own ``@transactional`` (mailman's commits once) is no retrying ndb one
        bare = {n for n in _union(RETRYING_TRANSACTIONS, {"ndb"}, set()) if "." not in n}
        retrying -= bare - cfg.retrying_transactions
        transactions -= bare - cfg.transactions - cfg.retrying_transactions
    return Vocab(
        frameworks=frozenset(fws),
        gets=_union(GETS, fws, cfg.gets),
        puts=_union(PUTS, fws, cfg.puts),
        locks=_union(LOCKS, fws, cfg.locks),
        transactions=transactions,
        retrying=retrying,
        side_effects=_union(SIDE_EFFECTS, fws, cfg.side_effects),
        weak_isolation=weak,
        ndb_serializable=(iso is None or iso in STRONG_ISOLATION),
    )


_BUILTINS = frozenset(dir(builtins))


def name_matches(dotted: str, patterns: Iterable[str]) -> bool:
    """Whether call name ``dotted`` matches one of ``patterns`` (see module docstring)."""
    if not dotted:
        return False
    parts = dotted.split(".")
    if len(parts) == 1 and parts[0] in _BUILTINS:
        # ``set(...)`` is the builtin, not ``cache.set``: a bare builtin name only matches itself
        return parts[0] in patterns
    for pat in patterns:
        pparts = pat.split(".")
        if pparts[-1] != parts[-1]:
            continue
        if len(pparts) == 1 or len(parts) == 1:
            return True
        n = min(len(parts), len(pparts))
        if parts[-n:] == pparts[-n:]:
            return True
    return False
