"""What the ``ast`` pass learns about a module, and what other modules can import from it.

Frameworks from imports, model classes and their bases, versioned models, txnsafety model
policies (declared, inherited, imported), functions handed to transaction runners. Facts,
not verdicts: the rules read them.
"""
from __future__ import annotations

import ast
import re
from typing import Iterator, Optional

from .config import IMPORT_ROOTS, Config, name_matches
from .model import Need


_VERSION_FIELDS = {"VersionField", "IntegerVersionField", "AutoIncVersionField",
                   "TriggerVersionField"}
#: txnsafety's model policy decorators (txnsafety/policies.py), aliases to the policy's name
POLICIES = {name: name for name in (
    "never_written", "abstract", "embedded", "written_once", "written_in_transaction",
    "written_with_user_lock", "written_in_transaction_or_user_lock", "written_by_single_writer",
    "dangerously_written_outside_transaction",
    "dangerously_written_outside_transaction_or_user_lock", "versioned")}
POLICIES.update(structured_property="embedded", written_via_cron="written_by_single_writer")
#: policies under which only TXN103 (and TXN105 for a check + insert) is reported
UNPROTECTED_POLICIES = frozenset({"dangerously_written_outside_transaction",
                                  "dangerously_written_outside_transaction_or_user_lock"})
#: policies under which only a lock protects a read-modify-write (a transaction does not)
LOCK_POLICIES = frozenset({"written_with_user_lock"})
#: policies under which only a transaction protects a read-modify-write (a user lock does not:
#: the runtime's ``Protection.TRANSACTION`` looks at the read's and the write's transactions
#: alone).  ``written_in_transaction_or_user_lock`` is not here: either protection counts.
TXN_POLICIES = frozenset({"written_in_transaction"})


def protection_needed(policy: Optional[str]) -> Need:
    """What a caller must hold for an unprotected helper's write to count as protected (the
    model's policy decides, as in ``rules/read_modify_write.judge``)."""
    if policy in LOCK_POLICIES:
        return Need.LOCK
    if policy in TXN_POLICIES:
        return Need.TXN
    return Need.ANY


class GetInfo:
    __slots__ = ("model", "getter", "key", "framework", "for_update", "locked", "maybe_none",
                 "session", "lookup", "lookup_values", "state", "statement")

    def __init__(self, model, getter, key, framework, for_update=False, locked=False,
                 maybe_none=False):
        self.model = model
        self.getter = getter
        self.key = key
        self.framework = framework
        self.for_update = for_update
        self.locked = locked
        self.maybe_none = maybe_none
        self.session = None
        #: the columns the lookup compared for equality (None: not known)
        self.lookup = None
        self.lookup_values: frozenset = frozenset()
        #: the columns the query selected its rows by state (``selection.state_columns``)
        self.state: frozenset = frozenset()
        #: a 2.0 ``select(M)`` statement kept in a name, not run yet (``flow/sqla_queries.py``)
        self.statement = False


# ---------------------------------------------------------------- module level

class ModuleInfo:
    """What the ``ast`` pass learns about a module."""

    def __init__(self, tree: ast.AST, vocab_cfg: Config, source: str = ""):
        self.frameworks: set[str] = set()
        self.versioned: set[str] = set(vocab_cfg.versioned_models)
        self.txn_targets: dict[str, bool] = {}
        self.imports: dict[str, tuple[str, str, int]] = {}
        self.txn_runners: dict[str, str] = {}
        self.functions: list[tuple[ast.AST, Optional[str]]] = []
        #: class name -> last names of its bases (versioned-ness is inherited)
        self.class_bases: dict[str, list[str]] = {}
        #: services and stores, whose ``self`` is never a row (``_builds_own_state``)
        self.service_classes: set[str] = set()
        #: ``import x as y``: y -> x (to recognise ``@y.versioned(...)``)
        self.import_aliases: dict[str, str] = {}
        #: model (class) name -> its txnsafety policy, declared here, inherited or imported
        self.policies: dict[str, str] = {}
        #: class-based view -> the model it declares (``model = Order``)
        self.view_models: dict[str, str] = {}
        decorated: list[ast.ClassDef] = []
        runner_text = _RUNNER_RE.search(source) is not None or any(
            n.split(".")[-1] in source for n in vocab_cfg.retrying_transactions | vocab_cfg.transactions)
        nodes = ast.walk(tree) if runner_text else _top_level(tree)
        for node in nodes:
            if isinstance(node, ast.Import):
                for a in node.names:
                    self._import(a.name)
                    if a.asname:
                        self.import_aliases[a.asname] = a.name
            elif isinstance(node, ast.ImportFrom) and (node.module or node.level):
                for a in node.names:
                    self.imports[a.asname or a.name] = (node.module or "", a.name, node.level)
                if not node.module:
                    continue
                self._import(node.module)
                for a in node.names:
                    self._import(node.module + "." + a.name)
            elif isinstance(node, ast.ClassDef):
                note_class(self, node, decorated)
            elif isinstance(node, ast.Call):
                fname = _ast_dotted(node.func)
                last = fname.rsplit(".", 1)[-1]
                ndb_runner = last in ("transaction", "run_in_transaction",
                                      "run_in_transaction_options", "transaction_async",
                                      "run_in_transaction_custom_retries")
                retrying = ndb_runner or name_matches(fname, vocab_cfg.retrying_transactions)
                if retrying or name_matches(fname, vocab_cfg.transactions):
                    for arg in node.args:
                        if isinstance(arg, ast.Name):
                            self.txn_targets[arg.id] = retrying
                            self.txn_runners[arg.id] = f"{fname}({arg.id})"
        if decorated:
            read_policies(decorated, self.imports, self.import_aliases, self.policies,
                          self.versioned)
            inherit_policies(self.policies, self.class_bases)
        inherit_versioned(self.versioned, self.class_bases)
        body = getattr(tree, "body", [])
        self._collect(body, None)
        #: functions connected to a signal: entry points whose parameters are rows the
        #: signal's sender read (judged where they write them: no caller shows a read)
        self.receivers: set[str] = signal_receivers(tree) if "connect(" in source or \
            "receiver(" in source else set()

    def _collect(self, body, cls: Optional[str]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions.append((node, cls))
            elif isinstance(node, ast.ClassDef) and cls is None:
                self._collect(node.body, node.name)
            elif isinstance(node, (ast.If, ast.Try)) and cls is None:
                for field in ("body", "orelse", "finalbody"):
                    self._collect(getattr(node, field, []) or [], cls)
                for h in getattr(node, "handlers", []) or []:
                    self._collect(h.body, cls)

    def class_model(self, cls: str) -> Optional[str]:
        """The model a class-based view declares (``model = Order``), if this module shows it."""
        return self.view_models.get(cls)

    def is_model_class(self, cls: str, _seen: Optional[set] = None, bases: tuple = ()) -> bool:
        """Whether class ``cls`` of this module is (as far as its bases show) an ORM model:
        a base named ``Model``/``...Model`` (``models.Model``, ``db.Model``, ``PolymorphicModel``),
        a declarative base, Django's user bases, or a class of this module that is one.
        With ``bases`` (suffixes such as ``MANAGER_BASES``): whether it is one of those."""
        seen = _seen if _seen is not None else set()
        if cls in seen:
            return False
        seen.add(cls)
        for base in self.class_bases.get(cls, ()):
            if base.endswith(bases) if bases else (base.endswith("Model") or base in _MODEL_BASES):
                return True
            if base in self.class_bases and self.is_model_class(base, seen, bases):
                return True
        return not bases and (cls in self.policies or cls in self.versioned)

    def _import(self, name: str) -> None:
        for root, fw in IMPORT_ROOTS.items():
            if name == root or name.startswith(root + "."):
                self.frameworks.add(fw)
        if name.endswith(".ndb") or name.endswith(".ext.db"):
            self.frameworks.add("ndb")

    @staticmethod
    def _versioned(node: ast.ClassDef) -> bool:
        for stmt in node.body:
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                value = stmt.value
                if value is None:
                    continue
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                if any(isinstance(t, ast.Name) and t.id == "__mapper_args__" for t in targets):
                    if "version_id_col" in ast.dump(value):
                        return True
                if isinstance(value, ast.Call) and \
                        _ast_dotted(value.func).rsplit(".", 1)[-1] in _VERSION_FIELDS:
                    return True
        return False


#: base class suffixes of Django's managers and querysets (``models.Manager``, ``BaseUserManager``)
MANAGER_BASES = ("Manager", "QuerySet")
#: base classes (last name) that make a class an ORM model, beyond ``...Model``
_MODEL_BASES = {"Base", "DeclarativeBase", "AbstractUser", "AbstractBaseUser", "Document"}

_RUNNER_RE = re.compile(r"transaction\(|run_in_transaction|transaction_async")


def note_class(facts: "ModuleInfo | ModuleFacts", node: ast.ClassDef, decorated: list) -> None:
    """One class's facts: its bases, the model a view declares (``model = Order``), its
    decorators (policies, read later) and whether it carries a version column."""
    if node.bases:
        facts.class_bases[node.name] = _base_names(node)
    if _builds_own_state(node):
        facts.service_classes.add(node.name)
    for stmt in node.body:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Name) and \
                any(isinstance(t, ast.Name) and t.id == "model" for t in stmt.targets):
            facts.view_models[node.name] = stmt.value.id
    if node.decorator_list:
        decorated.append(node)
    if ModuleInfo._versioned(node):
        facts.versioned.add(node.name)


def _builds_own_state(node: ast.ClassDef) -> bool:
    """A class with no base (or only ``object``) whose ``__init__`` sets ``self.<attr>``.

    A model never looks like this: Django's and SQLAlchemy's models inherit their base, and
    a mixin written for them has no constructor of its own.  Such a class is a service, a
    store or a coordinator (``PostgresCheckpointStore(db)``): its attributes live in the
    process, so a method changing them and then committing writes no row of its own."""
    if any(_ast_dotted(b) != "object" for b in node.bases) or node.keywords:
        return False
    for stmt in node.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == "__init__":
            return any(isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                       and t.value.id == "self"
                       for n in ast.walk(stmt) if isinstance(n, (ast.Assign, ast.AnnAssign))
                       for t in (n.targets if isinstance(n, ast.Assign) else [n.target]))
    return False


def _base_names(node: ast.ClassDef) -> list[str]:
    return [_ast_dotted(b).rsplit(".", 1)[-1] for b in node.bases]


def _from_txnsafety(module: str) -> bool:
    return module == "txnsafety" or module.startswith("txnsafety.")


def class_policy(node: ast.ClassDef, imports: dict, aliases: dict) -> Optional[str]:
    """The txnsafety policy a class declares (``@txnsafety.written_with_user_lock(fn)``,
    ``@policies.versioned("v")``, ``@legacy(reason=...)`` imported from txnsafety...), or None.

    Only a call of a name that comes from the ``txnsafety`` package counts: another
    library's ``@versioned`` is not a policy."""
    for dec in node.decorator_list:
        if not isinstance(dec, ast.Call):
            continue
        parts = []
        f = dec.func
        while isinstance(f, ast.Attribute):
            parts.append(f.attr)
            f = f.value
        if not isinstance(f, ast.Name):
            continue
        root = f.id
        imported = imports.get(root)
        if not parts:                               # ``@written_once()``: imported by name
            if imported is None or imported[2] or not _from_txnsafety(imported[0]):
                continue
            name = imported[1]
        else:                                       # ``@txnsafety.written_once()``, ``@ts.``...
            name = parts[0]
            if root in aliases:
                ok = _from_txnsafety(aliases[root])
            elif imported is not None:
                ok = not imported[2] and _from_txnsafety(imported[0] + "." + imported[1])
            else:
                ok = root == "txnsafety"
            if not ok:
                continue
        policy = POLICIES.get(name)
        if policy is not None:
            return policy
    return None


def read_policies(classes, imports: dict, aliases: dict, policies: dict, versioned: set) -> None:
    """The policies ``classes`` declare, into ``policies``; ``@versioned(...)`` models also
    into ``versioned`` (a version column by another name)."""
    for node in classes:
        policy = class_policy(node, imports, aliases)
        if policy is not None:
            policies[node.name] = policy
            if policy == "versioned":
                versioned.add(node.name)


def inherit_policies(policies: dict, class_bases: dict) -> bool:
    """Give the classes that declare none the policy of their first base that has one, as
    ``policy_of()`` does (``abstract`` is not inherited: it hides the bases' policies);
    True if something was added."""
    added = False
    changed = bool(policies) and bool(class_bases)
    while changed:
        changed = False
        for name, bases in class_bases.items():
            if name in policies:
                continue
            for base in bases:
                policy = policies.get(base)
                if policy is None:
                    continue
                if policy != "abstract":
                    policies[name] = policy
                    changed = added = True
                break
    return added


def inherit_versioned(versioned: set, class_bases: dict) -> bool:
    """Add the classes whose base is versioned (the version column / mapper argument is
    inherited); True if something was added."""
    added = False
    changed = bool(versioned) and bool(class_bases)
    while changed:
        changed = False
        for name, bases in class_bases.items():
            if name not in versioned and any(b in versioned for b in bases):
                versioned.add(name)
                changed = added = True
    return added


class ModuleFacts:
    """The declarations other modules can import, read from module-level statements only
    (for the files the analysis itself skips): imports, classes, versioned models and
    model policies."""

    def __init__(self, tree: ast.AST):
        self.imports: dict[str, tuple[str, str, int]] = {}
        self.class_bases: dict[str, list[str]] = {}
        self.service_classes: set[str] = set()
        self.versioned: set[str] = set()
        self.import_aliases: dict[str, str] = {}
        self.policies: dict[str, str] = {}
        self.view_models: dict[str, str] = {}
        decorated = []
        for node in _top_level(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or node.level):
                for a in node.names:
                    self.imports[a.asname or a.name] = (node.module or "", a.name, node.level)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.import_aliases[a.asname] = a.name
            elif isinstance(node, ast.ClassDef):
                note_class(self, node, decorated)
        if decorated:
            read_policies(decorated, self.imports, self.import_aliases, self.policies,
                          self.versioned)
            inherit_policies(self.policies, self.class_bases)
        inherit_versioned(self.versioned, self.class_bases)


def _top_level(tree: ast.AST) -> Iterator[ast.AST]:
    """Module-level statements, class bodies and the bodies of module-level if/try."""
    stack = list(getattr(tree, "body", []))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.ClassDef, ast.If, ast.Try)):
            for field in ("body", "orelse", "finalbody"):
                stack.extend(getattr(node, field, []) or [])
            for h in getattr(node, "handlers", []) or []:
                stack.extend(h.body)


def _ast_dotted(node: ast.AST) -> str:
    parts = []
    while True:
        if isinstance(node, ast.Name):
            parts.append(node.id)
            break
        if isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        else:
            break
    return ".".join(reversed(parts))


def signal_receivers(tree: ast.AST) -> set[str]:
    """``signal.connect(handler)`` at module level and ``@receiver(signal)`` functions."""
    found: set[str] = set()
    for node in _top_level(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and \
                isinstance(node.value.func, ast.Attribute) and node.value.func.attr == "connect" and \
                node.value.args and isinstance(node.value.args[0], ast.Name):
            found.add(node.value.args[0].id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                _ast_dotted(d.func if isinstance(d, ast.Call) else d).rsplit(".", 1)[-1] == "receiver"
                for d in node.decorator_list):
            found.add(node.name)
    return found
