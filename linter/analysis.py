"""The dataflow analysis: find lost-write shapes in one module.

Two stages keep it cheap (a libcst parse with positions costs ~10x an ``ast``
parse, and flake8 runs every plugin on every file):

1. ``ast`` (free under flake8, which hands us its tree): recognise the framework
   from imports, versioned models, functions handed to transaction runners, and
   pick the functions whose text holds both an entity read and a write (or a
   ``select_for_update`` / a side effect in a transaction).
2. libcst, on the picked functions only: a per-function, statement-ordered walk
   that tracks which names hold entities (read by a "get" or given as
   parameters), how they are mutated (blind, derived from the read, ``+=``,
   atomic ``F()``), where they are written, and the stack of transactions and
   locks around every read and write.  Nested functions see the outer reads.

A last pass joins functions of the same module: a helper that writes an entity
its caller read, a helper that re-reads and writes the row its caller holds
(TXN103), and an unprotected helper that every caller calls under a lock.
"""
from __future__ import annotations

import ast
import dataclasses
import io
import os
import re
from typing import Iterator, Optional, Sequence

import libcst as cst
import bisect

from libcst.metadata import ByteSpanPositionProvider, MetadataWrapper

from txnsafety.codes import CODES

from .config import NOT_LOCKS, Config, Vocab, name_matches, vocab_for, IMPORT_ROOTS
from .model import Confidence, Entity, Finding, Mutation, Scope
from .sessions import SessionTypes, cst_local_names, is_session_type, shape_of_cst
from .constraints import covered
from .wrappers import with_wrappers

#: a module that may declare its own transaction wrapper (see wrappers.py)
_WRAPPER_HINT = re.compile(r"unique|primary_key|OneToOneField|atomic|begin|transaction|lock")

# ---------------------------------------------------------------- prefilter

_GET_TOKENS = (r"objects|session|query|select_for_update|with_for_update|_or_404|\.key\b|Key\("
               r"|\.get_\w+\(|get_or_insert|fetch_under_lock|\bdb\.get\(|\bndb\b|scalar|\.get\(")
_WRITE_TOKENS = (r"\.a?save\(|\.put\(|put_multi|\.commit\(|\.flush\(|\.a?create\(|\.a?update\(|\.add\("
                 r"|bulk_create|\bbegin\(|\.put_async\(")
_TXN_TOKENS = r"atomic|transaction|begin\(|lock\("
# tighter, for picking functions inside a module that passed the module-level test
_F_GET_TOKENS = (r"objects|session|query|select_for_update|with_for_update|_or_404|key\.get\(|Key\("
                 r"|\b[A-Z]\w*\.get_\w+\(|get_or_insert|fetch_under_lock|\bdb\.get\(|scalar"
                 r"|self\.get_object\(|get_queryset\(|self\.(?:get|filter|first)\(")
_F_WRITE_TOKENS = (r"\.a?save\(|\.put\(|put_multi|\.commit\(|\.flush\(|\.a?create\(|\)\.a?update\("
                   r"|objects\.update\(|session\.add|\.add_all\(|bulk_create|\.put_async\("
                   r"|execute\(\s*(?:insert|update)\(|\.begin\(|begin_nested\(")


_SELF_RMW = re.compile(r"self\.\w+\s*[-+]=|self\.(\w+)\s*=\s*self\.\1\b|self\.\w+\.(?:append|extend)\(")
_SELF_WRITE = re.compile(r"self\.a?(?:save|put)\(|session\.commit\(")


class Prefilter:
    def __init__(self, vocab_cfg: Config):
        extra_g = "|".join(re.escape(n.split(".")[-1]) for n in sorted(vocab_cfg.gets))
        extra_p = "|".join(re.escape(n.split(".")[-1]) + r"\(" for n in sorted(vocab_cfg.puts))
        self.gets = re.compile(_GET_TOKENS + ("|" + extra_g if extra_g else ""))
        self.writes = re.compile(_WRITE_TOKENS + ("|" + extra_p if extra_p else ""))
        self.txn = re.compile(_TXN_TOKENS + "".join(
            "|" + re.escape(n.split(".")[-1]) for n in sorted(vocab_cfg.transactions
                                                              | vocab_cfg.retrying_transactions
                                                              | vocab_cfg.locks)))
        self.mut = re.compile(r"(?<!self)(?<!cls)\.\w+\s*(?:[-+*/|&]?=(?!=)|\.(?:append|extend|update|"
                              r"pop|remove|insert|setdefault|clear)\()|setattr\(|self\.a?(?:save|put)\(")
        self.f_gets = re.compile(_F_GET_TOKENS + ("|" + extra_g if extra_g else ""))
        self.f_writes = re.compile(_F_WRITE_TOKENS + ("|" + extra_p if extra_p else ""))
        side = vocab_cfg.side_effects | {"send_mail", "mail_admins", "delay", "apply_async",
                                         "taskqueue", "defer", "requests", "httpx", "urlopen",
                                         "cache", "memcache", "send_email", "enqueue", "publish"}
        self.side = re.compile("|".join(re.escape(n.split(".")[-1]) for n in sorted(side)))
        self.check = re.compile(r"exists\(|count\(|aggregate\(|func\.max\(|DoesNotExist|NoResultFound| is None|if not "
                                r"|(?:if|while) [^\n]*[<>]")

    def module_relevant(self, text: str) -> bool:
        if "select_for_update" in text:
            return True
        if _SELF_RMW.search(text) and _SELF_WRITE.search(text):
            return True             # a model method: ``self.n += 1; self.save()``
        if self.gets.search(text) and self.writes.search(text):
            return True
        return bool(self.txn.search(text))

    def function_relevant(self, text: str) -> bool:
        if "select_for_update" in text or "with_for_update" in text:
            return True
        has_write = self.f_writes.search(text) is not None
        if not has_write:
            return self.txn.search(text) is not None and self.side.search(text) is not None
        if self.f_gets.search(text) and (self.mut.search(text) or self.check.search(text)):
            return True
        if self.mut.search(text) and re.search(r"\.(a?save|put|put_async)\(|put_multi|commit\(|flush\(",
                                               text):
            return True
        return self.txn.search(text) is not None and self.side.search(text) is not None


# ---------------------------------------------------------------- helpers

_EMPTY_MODULE = cst.Module(body=[])


def source_lines(source: str, keepends: bool = False) -> list[str]:
    """The lines of ``source`` as Python numbers them: only ``\n``, ``\r\n`` and ``\r`` end
    a line (``str.splitlines`` also splits at a form feed, ``\v``, ``\x1c``..., which the
    tokenizer takes for whitespace, and every line number after one would be off)."""
    lines = io.StringIO(source, newline="").readlines()
    return lines if keepends else [line.rstrip("\r\n") for line in lines]


def code_of(node: cst.CSTNode) -> str:
    return _EMPTY_MODULE.code_for_node(node)


def label(node: cst.CSTNode) -> str:
    """Source text of a call's callee, shortened for messages."""
    text = " ".join(code_of(node).split())
    if len(text) <= 60:
        return text
    return dotted(node) if isinstance(node, cst.BaseExpression) and dotted(node) else text[:57] + "..."


def dotted(expr: cst.BaseExpression) -> str:
    """``a.b.c`` for a plain attribute chain; calls in the chain are skipped over."""
    parts: list[str] = []
    while True:
        if isinstance(expr, cst.Name):
            parts.append(expr.value)
            break
        if isinstance(expr, cst.Attribute):
            parts.append(expr.attr.value)
            expr = expr.value
        elif isinstance(expr, cst.Call):
            expr = expr.func
        elif isinstance(expr, cst.Subscript):
            expr = expr.value
        else:
            break
    return ".".join(reversed(parts))


def chain(expr: cst.BaseExpression) -> tuple[list[str], list[cst.Call], cst.BaseExpression]:
    """Names of the attribute/call chain (outermost last), its calls and its root."""
    names: list[str] = []
    calls: list[cst.Call] = []
    while True:
        if isinstance(expr, cst.Call):
            calls.append(expr)
            expr = expr.func
        elif isinstance(expr, cst.Attribute):
            names.append(expr.attr.value)
            expr = expr.value
        elif isinstance(expr, cst.Subscript):
            expr = expr.value
        else:
            if isinstance(expr, cst.Name):
                names.append(expr.value)
            break
    names.reverse()
    return names, calls, expr


def receiver_prefix(call: cst.Call) -> Optional[cst.BaseExpression]:
    """The object a call chain starts from: ``own`` in ``own.get(M, 1)`` and in
    ``own.execute(q).scalar_one()``, ``self.db`` in ``self.db.get(M, 1)``; None when the
    chain does not start at a plain name or attribute."""
    node = call.func.value if isinstance(call.func, cst.Attribute) else None
    while node is not None:
        inner = node
        while isinstance(inner, cst.Attribute):
            inner = inner.value
        if isinstance(inner, cst.Call) and isinstance(inner.func, cst.Attribute):
            node = inner.func.value
            continue
        return node if isinstance(inner, cst.Name) else None
    return None


#: Django's async ORM (4.1+) names each query method with an ``a``; the analysis judges
#: ``await M.objects.aget(...)`` / ``await x.asave()`` as their sync twins
_ASYNC_TWINS = {f"a{name}": name for name in (
    "get", "first", "last", "latest", "earliest", "get_or_create", "update_or_create", "in_bulk",
    "save", "create", "bulk_create", "bulk_update", "update", "delete", "exists", "count",
    "aggregate", "refresh_from_db", "contains")}


def terminal(call: cst.Call) -> str:
    f = call.func
    if isinstance(f, cst.Name):
        return f.value
    if isinstance(f, cst.Attribute):
        name = f.attr.value
        return _ASYNC_TWINS.get(name, name)
    return ""


def is_model_name(name: str) -> bool:
    return bool(name) and name[0].isupper() and not name.isupper()


def first_arg_name(call: cst.Call) -> Optional[str]:
    if call.args and call.args[0].keyword is None:
        v = call.args[0].value
        if isinstance(v, cst.Name):
            return v.value
        if isinstance(v, cst.Attribute):
            return v.attr.value
        if isinstance(v, cst.SimpleString):
            s = v.value.strip("'\"")
            return s if is_model_name(s) else None
    return None


def _maybe(model: Optional[str]) -> frozenset:
    return frozenset({model}) if model else frozenset()


def _models_in(expr: cst.CSTNode) -> frozenset:
    out = set()
    stack = [expr]
    while stack:
        n = stack.pop()
        if isinstance(n, cst.Name) and is_model_name(n.value) and \
                n.value not in ("None", "True", "False"):
            out.add(n.value)
        elif isinstance(n, cst.Attribute):
            stack.append(n.value)
            continue
        stack.extend(kids(n))
    return frozenset(out)


_STRING_NODES = (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)
_SEQUENCE_NODES = (cst.List, cst.Tuple, cst.ListComp)


def non_numeric(expr: cst.BaseExpression) -> bool:
    """Is ``expr`` obviously a string or a sequence (so ``x.f += expr`` is no counter)?

    Only what the source shows: literals, f-strings, ``"..." % v``, ``"...".format()`` /
    ``"...".join()``, ``str(...)``, and ``+`` with such an operand."""
    stack = [expr]
    while stack:
        expr = stack.pop()
        if isinstance(expr, cst.BinaryOperation):
            if isinstance(expr.operator, cst.Add):
                stack += (expr.right, expr.left)
            elif isinstance(expr.operator, cst.Modulo):
                stack.append(expr.left)
        elif isinstance(expr, _STRING_NODES) or isinstance(expr, _SEQUENCE_NODES):
            return True
        elif isinstance(expr, cst.Call):
            f = expr.func
            if isinstance(f, cst.Name) and f.value == "str" or \
                    isinstance(f, cst.Attribute) and f.attr.value in ("format", "join") and \
                    isinstance(f.value, _STRING_NODES):
                return True
    return False


def kwarg(call: cst.Call, name: str) -> Optional[cst.BaseExpression]:
    for a in call.args:
        if a.keyword is not None and a.keyword.value == name:
            return a.value
    return None


def names_in(node: cst.CSTNode) -> set[str]:
    out: set[str] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, cst.Name):
            out.add(n.value)
        elif isinstance(n, cst.Lambda):
            continue
        if isinstance(n, cst.Attribute):
            stack.append(n.value)      # attribute names are not variables
            continue
        stack.extend(kids(n))
    return out


_SKIP_FIELDS = ("whitespace", "lpar", "rpar", "semicolon", "comma", "leading_lines", "header",
                "footer", "lines_after", "newline", "trailing_whitespace", "equal", "colon", "dot",
                "star", "default_indent", "default_newline", "encoding", "indent")
_FIELDS: dict[type, tuple[str, ...]] = {}


#: names every statement of a handler may mention: sharing them links no check to an insert
_CONTEXT_NAMES = frozenset({"self", "cls", "request", "user", "session", "db"})


def _exits(block: cst.BaseSuite) -> bool:
    """Whether a block always leaves (its last statement raises, returns, continues or breaks)."""
    body = getattr(block, "body", ())
    if not body:
        return False
    last = body[-1]
    if isinstance(last, cst.SimpleStatementLine):
        return any(isinstance(s, (cst.Raise, cst.Return, cst.Continue, cst.Break)) for s in last.body)
    return False


def insert_keys(node: cst.CSTNode) -> Optional[frozenset[str]]:
    """The columns an insert sets, as keyword arguments of ``M.objects.create(...)``,
    ``session.add(M(...))`` or ``M(...).save()``; None when they are not all visible."""
    if not isinstance(node, cst.Call):
        return None
    call, term = node, terminal(node)
    if term in ("add", "save", "put"):
        inner = call.args[0].value if term == "add" and call.args else \
            (call.func.value if term != "add" and isinstance(call.func, cst.Attribute) else None)
        if not isinstance(inner, cst.Call):
            return None
        call = inner
    keys = set()
    for arg in call.args:
        if arg.keyword is None:
            return None            # positional or **kwargs: not known
        keys.add(arg.keyword.value)
    return frozenset(keys)


def _walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(kids(n))


def kids(node: cst.CSTNode) -> list:
    """Child nodes without whitespace tokens (much cheaper than ``node.children``)."""
    t = type(node)
    names = _FIELDS.get(t)
    if names is None:
        names = _FIELDS[t] = tuple(f.name for f in dataclasses.fields(t)
                                   if not f.name.startswith(_SKIP_FIELDS))
    out = []
    for name in names:
        v = getattr(node, name)
        if isinstance(v, cst.CSTNode):
            out.append(v)
        elif type(v) in (list, tuple):
            out.extend(x for x in v if isinstance(x, cst.CSTNode))
    return out


def iter_calls(node: cst.CSTNode) -> Iterator[cst.Call]:
    """Calls evaluated by ``node`` (not those inside lambdas or nested defs)."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, (cst.Lambda, cst.FunctionDef, cst.ClassDef)):
            continue
        if isinstance(n, cst.Call):
            yield n
        stack.extend(reversed(kids(n)))


_DJANGO_GET_TERMINALS = {"get", "first", "last", "latest", "earliest", "get_or_create",
                         "update_or_create", "in_bulk"}
_SQLA_TERMINALS = {"get", "first", "one", "one_or_none", "scalar", "scalar_one",
                   "scalar_one_or_none", "get_or_404", "first_or_404", "one_or_404"}
_MAYBE_NONE = {"first", "last", "one_or_none", "scalar", "scalar_one_or_none", "get_by_id",
               "get_by_key_name", "get"}
_MUTATING_METHODS = {"append", "extend", "update", "pop", "remove", "insert", "setdefault", "clear",
                     "add", "discard"}
#: Django's manager attributes: ``Model.objects``, and the ones generic code reaches for
_MANAGERS = frozenset({"objects", "_default_manager", "_base_manager"})
_ORM_MARKERS = {"objects", "_default_manager", "_base_manager", "filter", "filter_by", "exclude", "query",
                "where", "session", "scalars", "scalar", "execute", "all", "select_related", "prefetch_related",
                "using"}
_INTEGRITY = re.compile(r"IntegrityError|UniqueViolation|ConstraintViolation")
_NOT_FOUND = re.compile(r"DoesNotExist|NoResultFound|ObjectDoesNotExist|Http404")
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


def protection_needed(policy: Optional[str]) -> str:
    """What a caller must hold for an unprotected helper's write to count as protected:
    ``"lock"``, ``"txn"`` or ``"any"`` (the model's policy decides, as in ``judge``)."""
    if policy in LOCK_POLICIES:
        return "lock"
    if policy in TXN_POLICIES:
        return "txn"
    return "any"


class GetInfo:
    __slots__ = ("model", "getter", "key", "framework", "for_update", "locked", "maybe_none",
                 "session")

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
                if node.bases:
                    self.class_bases[node.name] = _base_names(node)
                for stmt in node.body:
                    if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Name) and \
                            any(isinstance(t, ast.Name) and t.id == "model" for t in stmt.targets):
                        self.view_models[node.name] = stmt.value.id
                if node.decorator_list:
                    decorated.append(node)
                if self._versioned(node):
                    self.versioned.add(node.name)
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
        With ``bases`` (suffixes such as ``_MANAGER_BASES``): whether it is one of those."""
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
_MANAGER_BASES = ("Manager", "QuerySet")
#: base classes (last name) that make a class an ORM model, beyond ``...Model``
_MODEL_BASES = {"Base", "DeclarativeBase", "AbstractUser", "AbstractBaseUser", "Document"}

_RUNNER_RE = re.compile(r"transaction\(|run_in_transaction|transaction_async")


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
                if node.bases:
                    self.class_bases[node.name] = _base_names(node)
                for stmt in node.body:
                    if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Name) and \
                            any(isinstance(t, ast.Name) and t.id == "model" for t in stmt.targets):
                        self.view_models[node.name] = stmt.value.id
                if node.decorator_list:
                    decorated.append(node)
                if ModuleInfo._versioned(node):
                    self.versioned.add(node.name)
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


# ---------------------------------------------------------------- function level

class _Positions:
    """Line/column of a node from libcst's byte spans (cheaper than PositionProvider)."""

    __slots__ = ("spans", "starts")

    def __init__(self, spans, source: str):
        self.spans = spans
        data = source.encode("utf-8")
        starts = [0]
        find = data.find
        i = find(b"\n")
        while i != -1:
            starts.append(i + 1)
            i = find(b"\n", i + 1)
        self.starts = starts

    def line(self, node: cst.CSTNode) -> int:
        return bisect.bisect_right(self.starts, self.spans[node].start)

    def col(self, node: cst.CSTNode) -> int:
        start = self.spans[node].start
        return start - self.starts[bisect.bisect_right(self.starts, start) - 1]


class CallSite:
    __slots__ = ("callee", "line", "col", "stack", "args", "live", "caller", "receiver",
                 "module_alias")

    def __init__(self, callee, line, col, stack, args, live, caller, receiver, module_alias=None):
        self.module_alias = module_alias   # ``services`` in ``services.award_bonus(...)``
        self.callee = callee
        self.line = line
        self.col = col
        self.stack = stack
        self.args = args          # list of (position or keyword, Entity)
        self.live = live          # entities read before the call
        self.caller = caller
        self.receiver = receiver  # Entity for x.method(...)


class Check:
    __slots__ = ("line", "kind", "what", "stack", "locked", "used", "framework", "models",
                 "subject", "names", "keys")

    def __init__(self, line, kind, what, stack, locked, framework, models=frozenset(),
                 subject=None):
        self.models = models
        self.subject = subject      # the entity whose field a limit check compares
        self.line = line
        self.kind = kind
        self.what = what
        self.stack = stack
        self.locked = locked
        self.used = False
        self.framework = framework
        #: for an aggregate: the variables that hold the value (the act must use one)
        self.names: set[str] = set()
        #: the names the check's expression reads (None: not known, e.g. a try/except lookup)
        self.keys: Optional[set[str]] = None


class Returned:
    """What a function returns when it returns an entity it read (a loader helper)."""

    __slots__ = ("info", "scopes", "line", "versioned", "policy")

    def __init__(self, info: GetInfo, scopes: tuple, line: int, versioned: bool,
                 policy: Optional[str] = None):
        self.info = info
        self.scopes = scopes        # the helper's transactions/locks at the read (end at return)
        self.line = line            # the read, in the helper's file
        self.versioned = versioned  # as the helper's module knows the model
        self.policy = policy        # likewise, the model's txnsafety policy


class FunctionAnalyzer:
    """Walks one function body in statement order."""

    def __init__(self, mod: "ModuleAnalyzer", node: cst.FunctionDef, positions, offset: int,
                 qualname: str, is_method: bool, outer: Optional["FunctionAnalyzer"] = None):
        self.mod = mod
        self.node = node
        self.positions = positions
        self.offset = offset
        self.qualname = qualname
        self.name = node.name.value
        self.outer = outer
        self.vocab: Vocab = mod.vocab
        self.entities: dict[str, Entity] = dict(outer.entities) if outer else {}
        self.taint: dict[str, set] = dict(outer.taint) if outer else {}
        self.querysets: dict[str, GetInfo] = dict(outer.querysets) if outer else {}
        self.sessions: set[str] = set(outer.sessions) if outer else set()
        #: local name -> what it holds, as sessions.SessionTypes resolves it ("": unknown)
        self.types: dict[str, str] = dict(outer.types) if outer else {}
        self.new_objects: dict[str, str] = {}
        self.check_vars: dict[str, tuple] = {}
        #: the names a check kept in a variable was computed from (``exists = ...filter(k=key)``)
        self.check_keys: dict[str, set[str]] = {}
        self.stack: list[Scope] = list(outer.stack) if outer else []
        self.row_locks: list[tuple[int, Optional[Scope]]] = []
        self.checks: list[Check] = []
        self.integrity_depth = 0
        self.params: dict[str, Entity] = {}
        self.param_order: list[str] = []
        self.param_writes: dict[str, tuple] = {}
        self.rmw_getters: dict[str, tuple] = {}
        self.inherited_rmw: dict[str, tuple] = {}
        self.deferred: list[tuple[Finding, str]] = []
        self.call_sites: list[CallSite] = []
        self.reported_write_lines: set[int] = set()
        self.is_method = is_method
        self.returned: Optional[Returned] = None

    # -- positions
    def line(self, node: cst.CSTNode) -> int:
        return self.positions.line(node) + self.offset

    def col(self, node: cst.CSTNode) -> int:
        return self.positions.col(node)

    def report(self, node_or_line, code: str, message: str, col: int = 0,
               deferrable: bool = False, need: str = "any",
               confidence: Confidence = Confidence.HIGH) -> None:
        if not self.mod.cfg.code_enabled(code):
            return
        line = node_or_line if isinstance(node_or_line, int) else self.line(node_or_line)
        if not isinstance(node_or_line, int):
            col = self.col(node_or_line)
        f = Finding(line, col, code, message, confidence=confidence)
        if deferrable and self.outer is None:
            self.deferred.append((f, "txn" if code == "TXN108" else need))
        else:
            self.mod.add(f)

    # -- entry
    def run(self) -> None:
        node = self.node
        line = self.line(node)
        # decorators: transactions and locks around the whole body
        for dec in node.decorators:
            scope = self.scope_for(dec.decorator, self.line(dec), decorator=True)
            if scope is not None:
                self.stack.append(scope)
        if self.name in self.mod.info.txn_targets:
            retrying = self.mod.info.txn_targets[self.name]
            ndb = "ndb" in self.mod.info.frameworks
            serializable = self.vocab.ndb_serializable if ndb else not self.vocab.weak_isolation
            label = self.mod.info.txn_runners.get(self.name, "a transaction runner")
            self.stack.append(Scope("txn", label, line, retrying=retrying,
                                    serializable=serializable, decorator=True,
                                    framework="ndb" if ndb else None))
        if self.mod.session_types is not None:
            # this function's own names are not the module's (nor an enclosing function's)
            self.types.update(dict.fromkeys(cst_local_names(node), ""))
        if self.is_method and self.outer is None and \
                self.mod.info.is_model_class(self.qualname.split(".", 1)[0], bases=_MANAGER_BASES):
            # a custom manager's or queryset's method: ``self.get(...)`` / ``self.create(...)``
            # are ``Model.objects.get(...)`` / ``.create(...)``
            self.querysets["self"] = GetInfo(None, None, None, "django")
        params = node.params
        for p in list(params.posonly_params) + list(params.params) + list(params.kwonly_params):
            pname = p.name.value
            self.param_order.append(pname)
            if pname == "cls":
                continue
            self.types[pname] = self.param_type(p, first=not self.param_order[:-1])
            ent = self.self_entity(pname, line) or Entity(pname, line, (), "param", framework=None)
            self.params[pname] = ent
            self.entities[pname] = ent
            self.taint.pop(pname, None)
        self.block(node.body)

    def self_entity(self, pname: str, line: int) -> Optional[Entity]:
        """``self`` of a model's method: a row its caller read, wherever that was.

        ``self.failures += 1; self.save()`` in a model method is a read-modify-write whose
        read happened before the method was called; the method cannot show that read's
        protection, so the row counts as read outside any transaction or lock (as the
        runtime would see it unless the caller re-read it under one)."""
        if pname != "self" or not self.is_method or self.outer is not None or self.param_order != ["self"]:
            return None
        cls = self.qualname.split(".", 1)[0]
        if not self.mod.info.is_model_class(cls):
            return None
        fw = self.framework_hint()
        return Entity("self", line, (), "self", model=cls, framework=fw,
                      versioned=cls in self.mod.info.versioned, policy=self.mod.policy_of(cls),
                      via=f"`{self.qualname}()`")

    # -- scopes
    def scope_for(self, expr: cst.BaseExpression, line: int, decorator: bool = False,
                  as_name: Optional[str] = None) -> Optional[Scope]:
        call = expr if isinstance(expr, cst.Call) else None
        name = dotted(expr)
        if not name:
            return None
        label = code_of(expr) if len(code_of(expr)) < 60 else name + "(...)"
        v = self.vocab
        if name_matches(name, NOT_LOCKS):
            return None
        last = name.rsplit(".", 1)[-1]
        if name_matches(name, v.transactions) and not self.foreign_name(name):
            if last in ("begin", "begin_nested") and call is None:
                return None
            retrying = name_matches(name, v.retrying)
            is_ndb = last in ("transactional", "transaction", "run_in_transaction",
                              "transactional_tasklet", "transaction_async") or \
                name.startswith(("ndb.", "db."))
            fw = "ndb" if is_ndb else ("sqlalchemy" if last in ("begin", "begin_nested") else "django")
            serializable = (v.ndb_serializable if fw == "ndb" else not v.weak_isolation)
            session = None
            if last in ("begin", "begin_nested"):
                recv = name.rsplit(".", 1)[0] if "." in name else None
                session = as_name or recv
            return Scope("txn", label, line, retrying=retrying, serializable=serializable,
                         decorator=decorator, session=session, framework=fw)
        if name_matches(name, v.locks) and call is not None:
            return Scope("lock", label, line, decorator=decorator)
        return None

    def foreign_name(self, name: str) -> bool:
        """A bare name imported from a module of no framework (``from myapp.db import
        transactional``) that configuration does not name: the project's own function, not
        the framework's namesake (mailman's ``@transactional`` commits once, never retries)."""
        if "." in name or name not in self.mod.info.imports:
            return False
        origin = self.mod.info.imports[name][0]
        if any(origin == root or origin.startswith(root + ".") for root in IMPORT_ROOTS):
            return False
        cfg = self.mod.cfg
        return not name_matches(name, {n for n in cfg.transactions | cfg.retrying_transactions if "." not in n})

    # -- sessions made by factories (see sessions.py)
    def resolved_type(self, expr: cst.BaseExpression) -> Optional[str]:
        """What ``expr`` holds when it can be resolved from definitions (a session, a
        session factory, an instance of a class holding one...), else None."""
        types = self.mod.session_types
        if types is None:
            return None
        return types.expression_type(self.mod.filename, shape_of_cst(expr), self.types)

    def param_type(self, param: cst.Param, first: bool) -> str:
        """A parameter's type from its annotation (``stack: SyncStack``), or ``self`` in a
        method; "" when unknown (the local hides a module-level name of the same spelling)."""
        types = self.mod.session_types
        if types is None:
            return ""
        if first and self.is_method and self.outer is None and param.name.value == "self":
            cls = self.qualname.rpartition(".")[0]       # "Outer.Inner": not a module-level class
            return f"inst:{self.mod.filename}:{cls}" if cls and "." not in cls else ""
        if param.annotation is None:
            return ""
        shape = shape_of_cst(param.annotation.annotation, annotation=True)
        return types.param_type(self.mod.filename, shape) or ""

    def note_local(self, name: str, value: cst.BaseExpression) -> None:
        """Remember what local ``name`` now holds; a resolved session joins ``sessions``."""
        t = self.resolved_type(value) if isinstance(value, (cst.Call, cst.Name, cst.Attribute,
                                                            cst.Await)) else None
        self.types[name] = t or ""
        if is_session_type(t):
            self.sessions.add(name)

    def typed_session(self, expr: Optional[cst.BaseExpression]) -> bool:
        return expr is not None and is_session_type(self.resolved_type(expr))

    def stack_ids(self) -> set[int]:
        return {id(s) for s in self.stack}

    def in_txn(self) -> Optional[Scope]:
        for s in reversed(self.stack):
            if s.kind == "txn":
                return s
        return None

    def protected_now(self) -> bool:
        """Is a check made now atomic with what follows in the same scopes?"""
        for s in self.stack:
            if s.kind == "lock" or (s.kind == "txn" and s.serializable):
                return True
        ids = self.stack_ids()
        for _line, txn in self.row_locks:
            if txn is None or id(txn) in ids:
                return True
        return False

    # -- statements
    def block(self, body) -> None:
        if isinstance(body, cst.SimpleStatementSuite):
            for small in body.body:
                self.small(small, body)
            return
        stmts = body.body if hasattr(body, "body") and not isinstance(body, (list, tuple)) else body
        for stmt in stmts:
            self.statement(stmt)

    def statement(self, stmt: cst.CSTNode) -> None:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                self.small(small, stmt)
        elif isinstance(stmt, cst.If):
            self.test(stmt.test, stmt)
            self.block(stmt.body)
            if stmt.orelse is not None:
                if isinstance(stmt.orelse, cst.If):
                    self.statement(stmt.orelse)
                else:
                    self.block(stmt.orelse.body)
        elif isinstance(stmt, cst.While):
            self.test(stmt.test, stmt)
            self.block(stmt.body)
            if stmt.orelse is not None:
                self.block(stmt.orelse.body)
        elif isinstance(stmt, cst.For):
            self.loop(stmt)
        elif isinstance(stmt, cst.With):
            self.with_(stmt)
        elif isinstance(stmt, cst.Try):
            self.try_(stmt)
        elif isinstance(stmt, cst.FunctionDef):
            self.nested(stmt)
        elif isinstance(stmt, cst.ClassDef):
            return
        else:
            for field in ("body", "orelse", "finalbody"):
                sub = getattr(stmt, field, None)
                if isinstance(sub, cst.BaseSuite):
                    self.block(sub)
            for case in getattr(stmt, "cases", ()) or ():
                self.block(case.body)

    def nested(self, node: cst.FunctionDef) -> None:
        inner = FunctionAnalyzer(self.mod, node, self.positions, self.offset,
                                 self.qualname + "." + node.name.value, False, outer=self)
        inner.run()
        self.mod.nested_seen += 1

    def small(self, small: cst.CSTNode, stmt: cst.CSTNode) -> None:
        if isinstance(small, cst.Assign):
            self.assign(small.targets, small.value, small)
        elif isinstance(small, cst.AnnAssign):
            if small.value is not None:
                self.assign([cst.AssignTarget(small.target)], small.value, small)
        elif isinstance(small, cst.AugAssign):
            self.aug_assign(small)
        else:
            self.calls_in(small)
            if isinstance(small, cst.Return) and small.value is not None and \
                    self.returned is None and self.outer is None:
                self.return_(small.value)

    def return_(self, value: cst.BaseExpression) -> None:
        """Remember the first entity this function reads and returns (for its callers)."""
        while isinstance(value, cst.Await):
            value = value.expression
        if isinstance(value, cst.Call):
            info = self.classify_get(value)
            if info is not None:
                self.returned = Returned(info, tuple(self.stack), self.line(value),
                                         bool(info.model and info.model in self.mod.info.versioned),
                                         self.mod.policy_of(info.model))
                return
            got = self.from_helper(value)
            if got is not None:
                ret = got[0]
                self.returned = Returned(ret.info, tuple(self.stack) + ret.scopes, self.line(value),
                                         ret.versioned, ret.policy)
        elif isinstance(value, cst.Name) and value.value in self.entities:
            ent = self.entities[value.value]
            if ent.source in ("get", "call"):
                info = GetInfo(ent.model, ent.getter, ent.key, ent.framework,
                               for_update=ent.for_update, locked=ent.locked_read,
                               maybe_none=ent.maybe_none)
                self.returned = Returned(info, ent.scopes, ent.read_line, ent.versioned,
                                         ent.policy)

    def from_helper(self, call: cst.Call) -> Optional[tuple]:
        """(Returned, helper name, its file if another module's) when ``call`` calls a
        function (of this module, or imported) that returns an entity it read."""
        func = call.func
        if isinstance(func, cst.Name):
            name, alias = func.value, None
        elif isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
            name, alias = func.attr.value, func.value.value
            if alias in ("self", "cls"):
                return self.mod.returned_by_method(self.qualname.split(".", 1)[0], name)
            if alias in self.entities:
                return None
        else:
            return None
        return self.mod.returned_by(name, alias)

    def new_returned_entity(self, name: str, got: tuple, line: int) -> Entity:
        ret, helper, filename = got
        info = ret.info
        where = f"{filename} " if filename else ""
        via = f"`{helper}()` ({where}line {ret.line})"
        # the helper's own transactions and locks ended when it returned
        ended = tuple(dataclasses.replace(s, where=f"in `{helper}()`, {where}") for s in ret.scopes)
        ent = Entity(name, line, tuple(self.stack) + ended, "call", model=info.model,
                     getter=info.getter, key=info.key, framework=info.framework,
                     for_update=info.for_update and not ended,
                     locked_read=info.locked and not ended, maybe_none=info.maybe_none,
                     versioned=ret.versioned or bool(info.model and
                                                     info.model in self.mod.info.versioned),
                     via=via, policy=ret.policy or self.mod.policy_of(info.model))
        if ent.for_update:
            self.row_locks.append((line, self.in_txn()))
        self.entities[name] = ent
        self.taint.pop(name, None)
        self.params.pop(name, None)
        self.new_objects.pop(name, None)
        self.querysets.pop(name, None)
        return ent

    # -- expressions
    def calls_in(self, node: cst.CSTNode, skip: Optional[cst.Call] = None) -> None:
        for call in iter_calls(node):
            if call is not skip:
                self.call(call)

    def classify_get(self, call: cst.Call) -> Optional[GetInfo]:
        term = terminal(call)
        if not term:
            return None
        names, calls, root = chain(call)
        name = dotted(call.func)
        v = self.vocab
        for_update = any(terminal(c) in ("select_for_update", "with_for_update") for c in calls)
        if not for_update:
            for c in calls:
                for a in c.args:
                    if isinstance(a.value, cst.Call) and "with_for_update" in dotted(a.value.func) \
                            or (a.keyword is not None and a.keyword.value == "with_for_update"):
                        for_update = True
        if not for_update:
            # session.execute(select(M).with_for_update())
            for c in calls:
                for a in c.args:
                    if isinstance(a.value, cst.Call):
                        if any(terminal(cc) == "with_for_update" for cc in chain(a.value)[1]):
                            for_update = True

        typed_name = None

        def mk(model, getter, fw, maybe_none=False, locked=False):
            key = code_of(call)
            key = re.sub(r"\.(select_for_update|with_for_update)\([^()]*\)", "", key)
            session = None
            if fw == "sqlalchemy":
                for n in names[:-1]:
                    if "session" in n.lower() or n in self.sessions:
                        session = n
                        break
                session = session or typed_name
            if session:
                key = key.replace(session + ".", "<session>.", 1)
            info = GetInfo(model, getter or model or name, key, fw, for_update=for_update,
                           locked=locked, maybe_none=maybe_none)
            info.session = session
            return info

        if term == "fetch_under_lock" or name_matches(name, {"fetch_under_lock"}):
            inner = call.args[0].value if call.args else None
            model = None
            if isinstance(inner, cst.Name) and inner.value in self.entities:
                model = self.entities[inner.value].model
            return mk(model, "fetch_under_lock", None, locked=True)
        root_name = root.value if isinstance(root, cst.Name) else ""
        if term == "get_object_or_404":
            return mk(first_arg_name(call), None, "django")
        if term == "get_object" and root_name == "self" and len(names) == 2 and \
                "django" in self.mod.info.frameworks | set(self.vocab.frameworks):
            # a class-based view's (or DRF view's) row: read by get_object(), usually in
            # dispatch()/get_context_data() before the handler that writes it
            return mk(self.mod.info.class_model(self.qualname.split(".", 1)[0]), "self.get_object", "django")
        if term in _DJANGO_GET_TERMINALS and "get_queryset" in names and root_name == "self":
            return mk(self.mod.info.class_model(self.qualname.split(".", 1)[0]), None, "django",
                      maybe_none=term in ("first", "last"))
        if _MANAGERS.intersection(names[1:]) or (root_name in self.querysets and len(names) >= 2):
            if term in _DJANGO_GET_TERMINALS or term in ("get_or_404",):
                base = self.querysets.get(root_name)
                if base is not None and base.for_update:
                    for_update = True
                model = root_name if is_model_name(root_name) else (base.model if base else None)
                return mk(model, None, "django", maybe_none=term in ("first", "last"))
            return None
        # SQLAlchemy
        recv = names[:-1]
        sessionish = any("session" in n.lower() for n in recv) or (root_name in self.sessions)
        if not sessionish and term in _SQLA_TERMINALS:
            typed = receiver_prefix(call)
            if self.typed_session(typed):
                sessionish = True
                typed_name = dotted(typed)
        if term == "get" and (sessionish or root_name in ("db",)) and first_arg_name(call) \
                and is_model_name(first_arg_name(call) or "") and len(call.args) >= 2:
            return mk(first_arg_name(call), None, "sqlalchemy", maybe_none=True)
        if term in ("get_or_404", "first_or_404", "one_or_404") and root_name == "db":
            return mk(first_arg_name(call), None, "sqlalchemy")
        if term in _SQLA_TERMINALS:
            sel_model = None
            for c in calls:
                t = terminal(c)
                if t in ("query",) and (sessionish or "query" in names):
                    sel_model = first_arg_name(c) or sel_model
                if t in ("execute", "scalars", "scalar"):
                    for a in c.args:
                        if isinstance(a.value, cst.Call):
                            for cc in chain(a.value)[1]:
                                if terminal(cc) == "select":
                                    sel_model = first_arg_name(cc) or sel_model
            if "query" in names and is_model_name(root_name) and sel_model is None:
                sel_model = root_name          # Flask-SQLAlchemy Model.query.get()
            if sel_model or (term != "get" and sessionish and
                             any(terminal(c) in ("execute", "scalars", "scalar", "query")
                                 for c in calls)):
                return mk(sel_model, None, "sqlalchemy", maybe_none=term in _MAYBE_NONE)
        # App Engine
        if term == "get" and (names[-2:-1] == ["key"] or
                              any(terminal(c) == "Key" for c in calls[1:])):
            model = None
            for c in calls[1:]:
                if terminal(c) == "Key":
                    model = first_arg_name(c)
            return mk(model, None, "ndb", maybe_none=True)
        if term == "get" and root_name == "db" and len(names) == 2:
            return mk(None, "db.get", "ndb", maybe_none=True)
        owner = names[-2] if len(names) >= 2 else ""      # ``pkg.objects.Backup.get_by_id(...)``
        if term in ("get_by_id", "get_by_key_name", "get_or_insert") and is_model_name(owner):
            return mk(owner, None, "ndb" if "ndb" in self.mod.info.frameworks or owner == root_name else None,
                      maybe_none=term != "get_or_insert")
        if name_matches(name, v.gets):
            model = root_name if is_model_name(root_name) else None
            return mk(model, name, None, maybe_none=True)
        if term.startswith("get_") and is_model_name(root_name) and len(names) == 2:
            return mk(root_name, None, None, maybe_none=True)
        return None

    def record_get(self, call: cst.Call, info: GetInfo) -> None:
        line = self.line(call)
        if info.for_update:
            txn = self.in_txn()
            if txn is None and info.framework == "django" and not info.locked:
                self.report(call, "TXN108", deferrable=True, message=(
                    f"TXN108 lock outside transaction: select_for_update() evaluated at line {line} "
                    f"outside any transaction, so the row lock ends with the statement (Django raises "
                    f"TransactionManagementError in autocommit); wrap the read and the write in "
                    f"transaction.atomic()"))
            self.row_locks.append((line, txn))
        elif info.locked:
            self.row_locks.append((line, None))

    def new_entity(self, name: str, info: GetInfo, line: int, source: str = "get") -> Entity:
        ent = Entity(name, line, tuple(self.stack), source, model=info.model, getter=info.getter,
                     key=info.key, framework=info.framework, for_update=info.for_update,
                     locked_read=info.locked, maybe_none=info.maybe_none,
                     versioned=bool(info.model and info.model in self.mod.info.versioned),
                     session=getattr(info, "session", None), policy=self.mod.policy_of(info.model))
        self.entities[name] = ent
        self.taint.pop(name, None)
        self.params.pop(name, None)
        self.types[name] = ""
        return ent

    def assign(self, targets, value: cst.BaseExpression, node: cst.CSTNode) -> None:
        line = self.line(node)
        while isinstance(value, cst.Await):
            value = value.expression
        info = self.classify_get(value) if isinstance(value, cst.Call) else None
        if info is not None and self.aggregate_kind(value):
            info = None                 # ``session.execute(select(func.max(..))).scalar()``: a number
        if info is not None:
            self.record_get(value, info)
            for t in targets:
                tgt = t.target
                if isinstance(tgt, (cst.Tuple, cst.List)) and tgt.elements:
                    tgt = tgt.elements[0].value
                if isinstance(tgt, cst.Name):
                    self.new_entity(tgt.value, info, line)
            for a in value.args:
                self.calls_in(a.value)
            return
        got = self.from_helper(value) if isinstance(value, cst.Call) else None
        if got is not None and all(isinstance(t.target, cst.Name) for t in targets):
            self.calls_in(value)
            for t in targets:
                self.new_returned_entity(t.target.value, got, line)
            return
        # querysets (not evaluated yet)
        qs_set: set[str] = set()
        if isinstance(value, cst.Call) or isinstance(value, cst.Attribute):
            names, calls, root = chain(value)
            lazy = terminal(value) not in ("count", "exists", "create", "update", "delete", "aggregate") \
                if isinstance(value, cst.Call) else True
            if _MANAGERS.intersection(names) and lazy:
                fu = any(terminal(c) == "select_for_update" for c in calls)
                model = root.value if isinstance(root, cst.Name) and is_model_name(root.value) else None
                for t in targets:
                    if isinstance(t.target, cst.Name):
                        self.querysets[t.target.value] = GetInfo(model, model, None, "django",
                                                                 for_update=fu)
                        qs_set.add(t.target.value)
        self.calls_in(value)
        # a check kept in a variable: ``exists = M.objects.filter(..).exists()``
        check = self.check_kind(value)
        self.note_aggregate(targets, value, line)
        for t in targets:
            tgt = t.target
            if isinstance(tgt, cst.Name):
                n = tgt.value
                if check:
                    self.check_vars[n] = check + (_models_in(value),)
                    self.check_keys[n] = names_in(value)
                if isinstance(value, cst.Name) and value.value in self.entities:
                    self.entities[n] = self.entities[value.value]          # alias
                    continue
                if n in self.entities:
                    del self.entities[n]
                if n not in qs_set:
                    self.querysets.pop(n, None)
                srcs = self.sources(value)
                if srcs:
                    self.taint[n] = srcs
                else:
                    self.taint.pop(n, None)
                if isinstance(value, cst.Call) and is_model_name(dotted(value.func).rsplit(".", 1)[-1]) \
                        and "." not in dotted(value.func):
                    self.new_objects[n] = dotted(value.func)
                else:
                    self.new_objects.pop(n, None)
                if isinstance(value, cst.Call) and "session" in dotted(value.func).lower():
                    self.sessions.add(n)
                self.note_local(n, value)
            elif isinstance(tgt, cst.Attribute) and self.copied_as_new(tgt, value):
                continue
            elif isinstance(tgt, cst.Attribute):
                self.mutate_attr(tgt, value, line)
            elif isinstance(tgt, cst.Subscript):
                base = tgt.value
                if isinstance(base, cst.Attribute) and isinstance(base.value, cst.Name) and \
                        base.value.value in self.entities:
                    self.entities[base.value.value].pending.append(
                        Mutation(line, base.attr.value, "derived"))

    def sources(self, expr: cst.CSTNode) -> set:
        out: set = set()
        for n in names_in(expr):
            if n in self.entities:
                out.add(self.entities[n])
            elif n in self.taint:
                out |= self.taint[n]
        return out

    def copied_as_new(self, tgt: cst.Attribute, value: cst.BaseExpression) -> bool:
        """``x.pk = None`` (``x.id = None``, ``x._state.adding = True``): Django's way to copy a
        row; the next ``save()`` inserts a new one, so ``x`` is a new object, not a read row."""
        base = tgt.value
        if isinstance(base, cst.Attribute) and base.attr.value == "_state" and tgt.attr.value == "adding":
            base, fresh = base.value, isinstance(value, cst.Name) and value.value == "True"
        else:
            fresh = tgt.attr.value in ("pk", "id") and isinstance(value, cst.Name) and value.value == "None"
        if not fresh or not isinstance(base, cst.Name) or base.value not in self.entities:
            return False
        ent = self.entities.pop(base.value)
        self.new_objects[base.value] = ent.model or "object"
        return True

    def mutate_attr(self, tgt: cst.Attribute, value: cst.BaseExpression, line: int) -> None:
        if not isinstance(tgt.value, cst.Name):
            return
        ent = self.entities.get(tgt.value.value)
        if ent is None:
            return
        attr = tgt.attr.value
        kind = "blind"
        if self.atomic_expr(value):
            kind = "atomic"
        elif isinstance(value, cst.BinaryOperation) and isinstance(value.operator, (cst.Add, cst.Subtract)) \
                and any(isinstance(side, cst.Attribute) and side.attr.value == attr and
                        isinstance(side.value, cst.Name) and side.value.value == tgt.value.value
                        for side in (value.left, value.right)):
            # ``x.n = x.n + 1`` is a counter; ``x.s = x.s + "suffix"`` a derived string
            kind = "derived" if non_numeric(value.left) or non_numeric(value.right) else "counter"
        elif ent in self.sources(value):
            kind = "derived"
        own = any(isinstance(n, cst.Attribute) and n.attr.value == attr and isinstance(n.value, cst.Name)
                  and n.value.value == tgt.value.value for n in _walk(value))
        ent.pending.append(Mutation(line, attr, kind, own=own))

    def atomic_expr(self, value: cst.CSTNode) -> bool:
        for call in iter_calls(value):
            if dotted(call.func).rsplit(".", 1)[-1] == "F":
                return True
        stack = [value]
        while stack:
            n = stack.pop()
            if isinstance(n, cst.Attribute) and isinstance(n.value, cst.Name) and \
                    is_model_name(n.value.value) and n.value.value not in self.entities:
                return True
            stack.extend(kids(n))
        return False

    def aug_assign(self, node: cst.AugAssign) -> None:
        line = self.line(node)
        self.calls_in(node.value)
        tgt = node.target
        if isinstance(tgt, cst.Attribute) and isinstance(tgt.value, cst.Name):
            ent = self.entities.get(tgt.value.value)
            if ent is not None:
                kind = "counter" if isinstance(node.operator, (cst.AddAssign, cst.SubtractAssign)) \
                    and not non_numeric(node.value) else "derived"
                if self.atomic_expr(node.value):
                    kind = "atomic"
                ent.pending.append(Mutation(line, tgt.attr.value, kind, own=True))
        elif isinstance(tgt, cst.Subscript) and isinstance(tgt.value, cst.Attribute) and \
                isinstance(tgt.value.value, cst.Name) and tgt.value.value.value in self.entities:
            self.entities[tgt.value.value.value].pending.append(
                Mutation(line, tgt.value.attr.value, "derived"))

    # -- calls
    def call(self, call: cst.Call) -> None:
        term = terminal(call)
        if not term:
            return
        name = dotted(call.func)
        func = call.func
        recv = func.value if isinstance(func, cst.Attribute) else None
        recv_name = recv.value if isinstance(recv, cst.Name) else None
        v = self.vocab
        line = None

        # an evaluated select_for_update()/with_for_update() read that is not assigned
        if term in _DJANGO_GET_TERMINALS | _SQLA_TERMINALS or term == "get_object_or_404":
            info = self.classify_get(call)
            if info is not None and (info.for_update or info.locked):
                self.record_get(call, info)

        # side effects (TXN107)
        if name_matches(name, v.side_effects) and not self.is_write_name(term) and \
                not self.transactional_task(call):
            txn = self.in_txn()
            if txn is not None and (txn.retrying or self.mod.cfg.side_effects_in_any_transaction):
                line = self.line(call)
                why = ("can be retried, so it may run several times" if txn.retrying
                       else "can roll back after it ran")
                self.report(call, "TXN107", (
                    f"TXN107 retry side effect: `{name}()` at line {line} runs inside "
                    f"`{txn.label}` (line {txn.line}), which {why}; move it after the transaction, "
                    f"into transaction.on_commit(), or make it a transactional task"))

        # entity re-reads
        if term == "refresh_from_db" and recv_name in self.entities:
            old = self.entities[recv_name]
            ent = self.new_entity(recv_name, GetInfo(old.model, old.getter, old.key, old.framework),
                                  self.line(call))
            ent.source = "get"
            ent.policy = ent.policy or old.policy
            return
        if term == "refresh" and recv is not None and "session" in dotted(recv).lower() and call.args:
            target = call.args[0].value
            if isinstance(target, cst.Name) and target.value in self.entities:
                old = self.entities[target.value]
                fu = kwarg(call, "with_for_update") is not None
                info = GetInfo(old.model, old.getter, old.key, "sqlalchemy", for_update=fu)
                ent = self.new_entity(target.value, info, self.line(call))
                ent.policy = ent.policy or old.policy
                if fu:
                    self.row_locks.append((self.line(call), self.in_txn()))
                return

        # writes
        if recv_name in self.entities and term in ("save", "put", "put_async") or \
                (recv_name in self.entities and name_matches(term, v.puts) and term != "put_multi"):
            ent = self.entities[recv_name]
            if term == "save":
                fields = self.update_fields(call)
                kind = "whole" if fields is False else "fields"
                self.write(ent, call, kind, None if fields in (False, True) else fields,
                           verb="saved")
            else:
                self.write(ent, call, "whole", None, verb="put")
            self.act(call, f"`{recv_name}.{term}()`", ent.model, "save", entity=ent)
            return
        if term in ("put", "put_multi", "put_async", "put_multi_async") and recv_name in ("db", "ndb") \
                and call.args:
            arg = call.args[0].value
            items = [e.value for e in arg.elements] if isinstance(arg, (cst.List, cst.Tuple)) else [arg]
            for it in items:
                if isinstance(it, cst.Name) and it.value in self.entities:
                    self.write(self.entities[it.value], call, "whole", None, verb="put")
            self.act(call, f"`{name}()`", None, "save")
            return
        if term in ("commit", "flush") and recv is not None and self.is_session(recv):
            self.flush_all(call, verb=f"flushed by `{code_of(func)}()`", session=dotted(recv))
            if term == "commit":
                self.release_row_locks(self.line(call))
            return
        if term in ("save", "put") and recv_name in self.new_objects:
            self.act(call, f"`{recv_name}.{term}()` of a new object", self.new_objects[recv_name],
                     "create")
            return
        if term in ("save", "put") and isinstance(recv, cst.Call) and \
                is_model_name(dotted(recv.func).rsplit(".", 1)[-1]):
            self.act(call, f"`{dotted(recv.func)}(...).{term}()`",
                     dotted(recv.func).rsplit(".", 1)[-1], "create")
            return
        if term in ("add", "add_all") and recv is not None and self.is_session(recv):
            model = None
            if call.args:
                arg = call.args[0].value
                if term == "add" and isinstance(arg, cst.Name) and arg.value in self.entities:
                    # an entity read earlier joins this session: its changes flush with it
                    self.entities[arg.value].session = dotted(recv)
                    return
                if isinstance(arg, cst.Call):
                    model = dotted(arg.func).rsplit(".", 1)[-1]
                elif isinstance(arg, cst.Name):
                    model = self.new_objects.get(arg.value)
            self.act(call, f"`{code_of(func)}()`", model, "create")
            return
        if term in ("create", "bulk_create") and (_MANAGERS.intersection(chain(call)[0]) or (
                isinstance(chain(call)[2], cst.Name) and chain(call)[2].value in self.querysets)):
            if kwarg(call, "ignore_conflicts") is None and kwarg(call, "update_conflicts") is None:
                root = chain(call)[2]
                self.act(call, f"`{label(call.func)}()`",
                         root.value if isinstance(root, cst.Name) else None, "create")
            return
        if term == "update" and (_MANAGERS.intersection(chain(call)[0]) or
                                 (chain(call)[2] is not None and
                                  isinstance(chain(call)[2], cst.Name) and
                                  chain(call)[2].value in self.querysets)):
            root = chain(call)[2]
            model = root.value if isinstance(root, cst.Name) else None
            if model in self.querysets:
                model = self.querysets[model].model
            self.act(call, f"`{label(call.func)}()`", model, "update")
            return
        if term in ("execute",) and call.args and isinstance(call.args[0].value, cst.Call):
            inner = call.args[0].value
            inner_names = [terminal(c) for c in chain(inner)[1]]
            if inner_names and inner_names[-1] in ("insert", "update") and not any(
                    t.startswith("on_conflict") or t == "prefix_with" for t in inner_names):
                stmt = [c for c in chain(inner)[1] if terminal(c) in ("insert", "update")][-1]
                self.act(call, f"`{dotted(inner.func)}`", first_arg_name(stmt),
                         "create" if terminal(stmt) == "insert" else "update")
            return
        if term == "setattr" and len(call.args) >= 2:
            tgt = call.args[0].value
            if isinstance(tgt, cst.Name) and tgt.value in self.entities:
                attr = call.args[1].value
                aname = attr.value.strip("'\"") if isinstance(attr, cst.SimpleString) else "?"
                kind = "derived" if len(call.args) > 2 and \
                    self.entities[tgt.value] in self.sources(call.args[2].value) else "blind"
                self.entities[tgt.value].pending.append(Mutation(self.line(call), aname, kind))
            return
        # in-place mutation of a field: ``x.tags.append(t)``
        if term in _MUTATING_METHODS and isinstance(recv, cst.Attribute) and \
                isinstance(recv.value, cst.Name) and recv.value.value in self.entities:
            self.entities[recv.value.value].pending.append(
                Mutation(self.line(call), recv.attr.value, "derived", own=True))
            return
        # calls to functions of this module (resolved after all functions are seen)
        if isinstance(func, cst.Name) or (recv_name is not None):
            self.record_call_site(call, term, recv_name)

    @staticmethod
    def transactional_task(call: cst.Call) -> bool:
        for key in ("transactional", "_transactional"):
            v = kwarg(call, key)
            if isinstance(v, cst.Name) and v.value == "True":
                return True
        return False

    def is_write_name(self, term: str) -> bool:
        return term in ("save", "put")

    def is_session(self, recv: cst.BaseExpression) -> bool:
        d = dotted(recv)
        return "session" in d.lower() or d in self.sessions or d.split(".")[0] in self.sessions \
            or self.typed_session(recv)

    def update_fields(self, call: cst.Call):
        """False: no update_fields; True: given but not literal; else the set of names."""
        v = kwarg(call, "update_fields")
        if v is None:
            return False
        if isinstance(v, (cst.List, cst.Tuple, cst.Set)):
            out = set()
            for el in v.elements:
                if isinstance(el.value, cst.SimpleString):
                    out.add(el.value.value.strip("'\""))
                else:
                    return True
            return out
        return True

    def record_call_site(self, call: cst.Call, term: str, recv_name: Optional[str]) -> None:
        on_entity = recv_name in self.entities and recv_name not in ("self", "cls")
        if term not in self.mod.function_names and not on_entity:
            return              # ``x.method()`` on a row is kept: a model method may write it
        module_alias = None
        if recv_name is not None and recv_name not in ("self", "cls") and recv_name not in self.entities:
            if recv_name not in self.mod.module_aliases:
                return
            module_alias, recv_name = recv_name, None
        args = []
        for i, a in enumerate(call.args):
            if isinstance(a.value, cst.Name) and a.value.value in self.entities:
                key = a.keyword.value if a.keyword is not None else i
                args.append((key, self.entities[a.value.value]))
        receiver = self.entities.get(recv_name) if recv_name not in (None, "self", "cls") else None
        live = [e for e in set(self.entities.values()) if e.source not in ("param", "self")]
        site = CallSite(term, self.line(call), self.col(call), tuple(self.stack), args, live,
                        self, receiver, module_alias)
        self.mod.call_sites.append(site)

    # -- writes
    def write(self, ent: Entity, node: cst.CSTNode, kind: str, fields, verb: str,
              line: Optional[int] = None) -> None:
        w_line = line if line is not None else self.line(node)
        relevant = ent.relevant(kind, fields)
        if ent.source == "self":
            # a model method that sets fields from arguments or other fields writes what the
            # caller asked for; one that derives a field from its own old value loses updates
            relevant = [m for m in relevant if m.kind == "counter" or (m.kind == "derived" and m.own)]
            if relevant and not any(s.kind for s in self.stack if not s.decorator):
                # callers that read the row are judged at their call (resolve_calls)
                self.param_writes.setdefault("self", (w_line, relevant, kind))
        if kind == "fields" and fields is not None:
            ent.pending = [m for m in ent.pending if m.attr not in fields]
        else:
            ent.pending = []
        ent.writes.append(w_line)
        if not relevant:
            return
        ent.had_rmw = True
        self.check_internal(ent, w_line)
        if ent.source != "param" and ent.getter:
            self.rmw_getters.setdefault(ent.getter, (ent.read_line, w_line))
        stack = tuple(self.stack)
        if ent.source == "param":
            own = tuple(s for s in stack if not s.decorator and
                        not (self.outer and s in self.outer.stack))
            if not own:
                if ent.name in self.params and self.outer is None:
                    self.param_writes.setdefault(ent.name, (w_line, relevant, kind))
                return
            stack = own
        result = judge(ent, stack, relevant, self.vocab)
        if result is None:
            return
        code, detail = result
        msg = compose(code, ent, w_line, verb, relevant, detail, self.vocab)
        col = 0 if line is not None else self.col(node)
        self.reported_write_lines.add(w_line)
        # an unprotected helper is fine when every caller protects it: with a lock, for a
        # model that only a lock protects
        blind = all(m.kind == "blind" for m in relevant)     # a stale copy, nothing derived
        self.report(w_line, code, msg, col=col, deferrable=code in ("TXN102", "TXN106")
                    and ent.source != "param", need=protection_needed(ent.policy),
                    confidence=Confidence.LOW if blind else Confidence.HIGH)

    def check_internal(self, ent: Entity, w_line: int) -> None:
        """TXN103 in one function: two objects for the same row, both written."""
        if not ent.key:
            return
        for other in set(self.entities.values()):
            if other is ent or other.key != ent.key or not other.writes:
                continue
            if ent.framework == "sqlalchemy" and ent.session == other.session:
                continue     # the identity map hands out one object per row and session
            first_write = min(other.writes)
            if other.had_rmw and ent.read_line < first_write < w_line and other.read_line <= w_line:
                self.report(w_line, "TXN103", (
                    f"TXN103 internal: `{ent.name}` (read at line {ent.read_line}) and "
                    f"`{other.name}` (read at line {other.read_line}) are two objects for the same "
                    f"row; `{other.name}` is written at line {first_write}, then `{ent.name}` at "
                    f"line {w_line} overwrites that change; read the row once and reuse the object"))
                return

    def flush_all(self, node: cst.CSTNode, verb: str, line: Optional[int] = None,
                  session: Optional[str] = None) -> None:
        for ent in list({id(e): e for e in self.entities.values()}.values()):
            if not ent.pending:
                continue
            if session and ent.session and session.split(".")[-1] != ent.session.split(".")[-1]:
                continue
            if ent.framework in ("django", "ndb"):
                continue
            if ent.framework is None and ent.source == "param" and \
                    "sqlalchemy" not in self.mod.info.frameworks:
                continue
            self.write(ent, node, "flush", None, verb=verb, line=line)

    def release_row_locks(self, line: int) -> None:
        for ent in set(self.entities.values()):
            if ent.for_update and ent.released_line is None and ent.framework == "sqlalchemy":
                ent.released_line = line
        self.row_locks = [(ln, txn) for ln, txn in self.row_locks if txn is not None]

    # -- check-then-act (TXN105)
    def orm_query(self, call: cst.Call) -> bool:
        """Is ``call`` (an ``exists()`` / ``count()``) a database query, not a path or a list?"""
        if isinstance(call.func, cst.Name):
            return call.func.value in ("exists", "count")        # sqlalchemy exists()/func.count
        names, calls, root = chain(call)
        if any(n in _ORM_MARKERS for n in names[:-1]):
            return True
        if isinstance(root, cst.Name) and root.value in self.querysets:
            return True
        return any(isinstance(a.value, cst.Call) and terminal(a.value) in ("select", "query")
                   for c in calls for a in c.args)

    def check_kind(self, expr: cst.CSTNode) -> Optional[tuple]:
        for call in iter_calls(expr):
            t = terminal(call)
            if t == "exists" and self.orm_query(call):
                return ("exists", "existence")
        if isinstance(expr, cst.Comparison):
            for call in iter_calls(expr):
                t = terminal(call)
                if t == "count" and (self.orm_query(call) or dotted(call.func) == "func.count"):
                    return ("count", "a count")
                if t == "len" and isinstance(call.func, cst.Name) and call.args and \
                        isinstance(call.args[0].value, cst.Call) and \
                        self.orm_query(call.args[0].value):
                    return ("count", "a count")
        return None

    def aggregate_kind(self, expr: cst.CSTNode) -> Optional[str]:
        """``"a count"`` / ``"an aggregate"`` when ``expr`` reads one from the database."""
        for call in iter_calls(expr):
            t = terminal(call)
            if t == "count" and (self.orm_query(call) or dotted(call.func) == "func.count"):
                return "a count"
            if (t == "aggregate" and self.orm_query(call)) or dotted(call.func) in ("func.max", "func.count"):
                return "an aggregate"
        return None

    def note_aggregate(self, targets, value: cst.BaseExpression, line: int) -> None:
        """Aggregate-then-insert: ``n = M.objects.filter(..).count()`` (or ``Max``) and then
        an insert that uses ``n`` (``number=n + 1``): two requests compute the same value."""
        names = [t.target.value for t in targets if isinstance(t.target, cst.Name)]
        if not names:
            return
        used = names_in(value)
        for c in self.checks:
            if c.kind == "aggregate" and not c.used and c.names & used:
                c.names.update(names)         # ``number = last + 1`` carries the value on
                return
        what = self.aggregate_kind(value)
        if what is None:
            return
        check = Check(line, "aggregate", f"`{names[0]}` computed from {what}", tuple(self.stack),
                      self.protected_now(), None, _models_in(value))
        check.names.update(names)
        self.checks.append(check)

    def test(self, test: cst.BaseExpression, node: cst.CSTNode) -> None:
        self.calls_in(test)
        line = self.line(node)
        found = self.check_kind(test)
        if found is None:
            for n in names_in(test):
                if n in self.check_vars:
                    found = self.check_vars[n]
                    break
        if found is None:
            used = names_in(test)
            for c in self.checks:
                if c.kind == "aggregate" and c.names & used:
                    found = ("count", f"{c.what} (line {c.line})", c.models)   # ``if not used:``
                    break
        if found is None:
            found = self.entity_check(test)
        if found is not None:
            kind, what = found[0], found[1]
            models = found[2] if len(found) > 2 else _models_in(test)
            check = Check(line, kind, what, tuple(self.stack), self.protected_now(),
                          None, models, found[3] if len(found) > 3 else None)
            check.keys = names_in(test).union(*(self.check_keys.get(n, ()) for n in names_in(test)))
            self.checks.append(check)

    def entity_check(self, test: cst.BaseExpression) -> Optional[tuple]:
        stack = [test]
        while stack:
            n = stack.pop()
            if isinstance(n, cst.Comparison):
                left = n.left
                for ct in n.comparisons:
                    op = ct.operator
                    right = ct.comparator
                    if isinstance(op, (cst.Is, cst.IsNot)) and isinstance(right, cst.Name) and \
                            right.value == "None":
                        if isinstance(left, cst.Name) and left.value in self.entities and \
                                self.entities[left.value].maybe_none:
                            return ("none", f"`{left.value} is None`",
                                    _maybe(self.entities[left.value].model))
                        if isinstance(left, cst.Call) and self.classify_get(left) is not None:
                            return ("none", "a missing row", _maybe(self.classify_get(left).model))
                    if isinstance(op, (cst.LessThan, cst.LessThanEqual, cst.GreaterThan,
                                       cst.GreaterThanEqual)):
                        for side in (left, right):
                            if isinstance(side, cst.Attribute) and isinstance(side.value, cst.Name) \
                                    and side.value.value in self.entities and \
                                    self.entities[side.value.value].source != "param":
                                subject = self.entities[side.value.value]
                                return ("limit", f"`{code_of(side)}` against a limit",
                                        _maybe(subject.model), subject)
                    left = right
            elif isinstance(n, cst.UnaryOperation) and isinstance(n.operator, cst.Not):
                e = n.expression
                if isinstance(e, cst.Name) and e.value in self.entities and \
                        self.entities[e.value].maybe_none:
                    return ("none", f"`not {e.value}`", _maybe(self.entities[e.value].model))
                stack.append(e)
            elif isinstance(n, cst.BooleanOperation):
                stack.extend([n.left, n.right])
            elif isinstance(n, cst.Name) and n.value in self.entities and \
                    self.entities[n.value].maybe_none:
                return ("none", f"`{n.value}`", _maybe(self.entities[n.value].model))
        return None

    def act(self, node: cst.CSTNode, what: str, model: Optional[str] = None,
            kind: str = "create", entity: Optional[Entity] = None) -> None:
        if not self.checks:
            return
        line = self.line(node)
        pending = []
        for c in self.checks:
            if c.used or c.line > line:
                continue
            if c.kind == "aggregate":
                if kind == "create" and c.names & names_in(node):
                    pending.append(c)
                continue
            if c.kind in ("exists", "none") and kind != "create":
                continue        # a missing row, then a write of a row that exists: no duplicate
            if c.kind in ("exists", "none") and not c.models and c.keys is not None and \
                    not (c.keys - _CONTEXT_NAMES) & names_in(node):
                continue        # a check of an unknown model that shares no value with the insert
            if c.kind == "limit":
                if kind in ("save", "update") and model is not None and model in c.models:
                    if entity is not None and c.subject is entity and \
                            entity.policy in UNPROTECTED_POLICIES:
                        # a limit on the row's own field, then its save: the read-modify-write
                        # that the model's policy accepts
                        c.used = True
                        continue
                    pending.append(c)
            elif model is None or not c.models or model in c.models:
                pending.append(c)
        if not pending:
            return
        check = pending[-1]
        for c in pending:
            c.used = True
        if check.kind in ("exists", "none") and kind == "create" and model and \
                covered(self.mod.cfg.unique_keys.get(model, []), insert_keys(node)):
            return                  # a unique key turns the racing insert into an IntegrityError
        if line in self.reported_write_lines:
            return
        if self.integrity_depth:
            return
        if check.locked and {id(s) for s in check.stack} <= self.stack_ids():
            return
        fw = self.framework_hint()
        if check.kind == "aggregate":
            fix = ("declare a unique constraint on the computed column (with its scope) and retry on "
                   "IntegrityError, or lock the parent row before computing it")
        elif check.kind in ("exists", "none"):
            fix = {"django": "use get_or_create()/update_or_create(), or a unique constraint and "
                             "catch IntegrityError around the create",
                   "ndb": "use get_or_insert() or do both in @ndb.transactional",
                   }.get(fw, "insert first and catch IntegrityError (a unique constraint, "
                             "INSERT ... ON CONFLICT), or get_or_create()")
        else:
            fix = {"ndb": "do the check and the write in @ndb.transactional",
                   "sqlalchemy": "lock the parent row with with_for_update() before the check, or make "
                                 "the write a conditional UPDATE ... WHERE"}.get(
                fw, "lock the parent row with select_for_update() inside transaction.atomic() before "
                    "the check, or make the write a conditional UPDATE ... WHERE")
        self.report(node, "TXN105", (
            f"TXN105 check-then-act: {check.what} {'read' if check.kind == 'aggregate' else 'checked'} at "
            f"line {check.line}, then {what} at "
            f"line {line} with nothing making the pair atomic; {fix}"))

    def framework_hint(self) -> Optional[str]:
        fws = self.mod.info.frameworks
        for fw in ("django", "sqlalchemy", "ndb"):
            if fw in fws:
                return fw
        return None

    # -- compound statements
    def with_(self, node: cst.With) -> None:
        pushed: list[Scope] = []
        for item in node.items:
            expr = item.item
            as_name = item.asname.name.value if item.asname is not None and \
                isinstance(item.asname.name, cst.Name) else None
            if isinstance(expr, cst.Call) and name_matches(dotted(expr.func), {"fetch_under_lock"}):
                # ``with fetch_under_lock(x) as x:`` takes x's user lock and yields a fresh copy
                scope = Scope("lock", label(expr), self.line(node))
                self.stack.append(scope)
                pushed.append(scope)
                if as_name:
                    arg = expr.args[0].value if expr.args else None
                    old = self.entities.get(arg.value) if isinstance(arg, cst.Name) else None
                    info = GetInfo(old.model if old else None, old.getter if old else None,
                                   old.key if old else None, old.framework if old else None)
                    fresh = self.new_entity(as_name, info, self.line(node))
                    fresh.policy = fresh.policy or (old.policy if old else None)
                continue
            scope = self.scope_for(expr, self.line(node), as_name=as_name)
            if scope is not None:
                self.stack.append(scope)
                pushed.append(scope)
                if as_name and scope.kind == "txn":
                    self.sessions.add(as_name)
            else:
                self.calls_in(expr)
                if as_name and ("session" in dotted(expr).lower() or "connect" in dotted(expr)):
                    self.sessions.add(as_name)
                elif as_name:
                    self.note_local(as_name, expr)     # ``with stack.Auto() as own:``
        self.block(node.body)
        line = self.line(node)
        for scope in reversed(pushed):
            if scope.kind == "txn" and scope.framework == "sqlalchemy":
                self.flush_all(node, verb="flushed when the block commits", line=line,
                               session=scope.session)
                self.release_row_locks(line)
            self.stack.remove(scope)

    def loop(self, node: cst.For) -> None:
        it = node.iter
        line = self.line(node)
        info = None
        if isinstance(it, cst.Name) and it.value in self.querysets:
            info = self.querysets[it.value]
        elif isinstance(it, cst.Call) or isinstance(it, cst.Attribute):
            names, calls, root = chain(it)
            if _MANAGERS.intersection(names):
                fu = any(terminal(c) == "select_for_update" for c in calls)
                model = root.value if isinstance(root, cst.Name) and is_model_name(root.value) else None
                info = GetInfo(model, model, None, "django", for_update=fu)
            elif isinstance(it, cst.Call) and terminal(it) in ("scalars", "all") and \
                    any(terminal(c) in ("scalars", "query", "execute") for c in calls):
                info = GetInfo(None, None, None, "sqlalchemy",
                               for_update="with_for_update" in code_of(it))
        self.calls_in(it)
        if info is not None and isinstance(node.target, cst.Name):
            if info.for_update:
                fake = GetInfo(info.model, info.getter, None, info.framework, for_update=True)
                if self.in_txn() is None and info.framework == "django":
                    self.report(node, "TXN108", (
                        f"TXN108 lock outside transaction: select_for_update() evaluated at line "
                        f"{line} outside any transaction, so the row locks end at once; wrap the loop "
                        f"in transaction.atomic()"))
                self.row_locks.append((line, self.in_txn()))
                info = fake
            self.new_entity(node.target.value, info, line, source="loop")
        self.block(node.body)
        if node.orelse is not None:
            self.block(node.orelse.body)

    def try_(self, node: cst.Try) -> None:
        integrity = any(h.type is not None and _INTEGRITY.search(code_of(h.type))
                        for h in node.handlers)
        not_found = any(h.type is not None and _NOT_FOUND.search(code_of(h.type))
                        for h in node.handlers)
        if integrity:
            self.integrity_depth += 1
        get_line = None
        get_model = None
        if not_found:
            for stmt in node.body.body:
                for call in iter_calls(stmt):
                    got = self.classify_get(call)
                    if got is not None:
                        get_line = self.line(call)
                        get_model = got.model
                        break
                if get_line:
                    break
        self.block(node.body)
        if integrity:
            self.integrity_depth -= 1
        for h in node.handlers:
            miss = None
            if get_line is not None and h.type is not None and _NOT_FOUND.search(code_of(h.type)):
                miss = Check(get_line, "none", "a missing row (get() in try/except DoesNotExist)",
                             tuple(self.stack), self.protected_now(), None, _maybe(get_model))
                self.checks.append(miss)
            self.block(h.body)
            if miss is not None and _exits(h.body):
                # ``except DoesNotExist: raise Http404``: what follows the try has the row
                miss.used = True
        if node.orelse is not None:
            self.block(node.orelse.body)
        if node.finalbody is not None:
            self.block(node.finalbody.body)


# ---------------------------------------------------------------- judgement

def judge(ent: Entity, stack: tuple, relevant: list, vocab: Vocab) -> Optional[tuple]:
    """Which code (if any) a read-modify-write of ``ent`` written under ``stack`` earns."""
    if ent.versioned or ent.policy in UNPROTECTED_POLICIES:
        return None
    counter = any(m.kind == "counter" for m in relevant)
    if ent.policy in TXN_POLICIES:
        return judge_txn(ent, stack, counter)
    if ent.locked_read:
        return None
    if ent.policy in LOCK_POLICIES:
        return judge_lock(ent, stack, counter)
    return _judge_scopes(ent, list(ent.scopes), list(stack), counter)


def _judge_scopes(ent: Entity, R: list, W: list, counter: bool) -> Optional[tuple]:
    """The judgement of a read under scopes ``R`` and a write under ``W`` (outermost first),
    where every scope in them counts as protection."""
    r_ids = {id(s) for s in R}
    w_ids = {id(s) for s in W}
    if ent.for_update and ent.released_line is not None:
        return ("TXN104", ("released", ent.released_line))
    if not R and not W:
        if ent.for_update:
            return None
        return ("TXN106" if counter else "TXN102", None)
    if not R and W:
        if ent.for_update and ent.framework == "sqlalchemy":
            return None
        return ("TXN101", W[-1])
    gone = [s for s in R if id(s) not in w_ids]
    if gone:
        return ("TXN104", ("ended", gone[-1]))
    common = [s for s in W if id(s) in r_ids]
    locks = [s for s in common if s.kind == "lock"]
    if locks:
        lock = locks[0]
        idx = W.index(lock)
        outer_txn = [s for s in W[:idx] if s.kind == "txn"]
        if outer_txn:
            return ("TXN104", ("lock-before-commit", lock, outer_txn[-1]))
        return None
    if ent.for_update:
        return None
    if any(s.kind == "txn" and s.serializable for s in common):
        return None
    txn = common[-1]
    return ("TXN106" if counter else "TXN109", txn)


def judge_txn(ent: Entity, stack: tuple, counter: bool) -> Optional[tuple]:
    """``judge`` for a model that only a transaction protects (``@written_in_transaction``),
    as the runtime's ``_transaction_problem`` judges it: user locks (``user_write_lock()``,
    ``fetch_under_lock()``, any configured lock) are not looked at, so a read-modify-write
    under a lock but outside a transaction is TXN102 (TXN106 for a counter), and a read
    under only a lock then written in a transaction is TXN101."""
    R = [s for s in ent.scopes if s.kind == "txn"]
    W = [s for s in stack if s.kind == "txn"]
    result = _judge_scopes(ent, R, W, counter)
    if result is not None and result[1] is None:
        locks = [s for s in stack if s.kind == "lock"] or [s for s in ent.scopes if s.kind == "lock"]
        if locks:       # say why the lock held around it does not count
            return (result[0], ("no-txn", locks[-1]))
    return result


def judge_lock(ent: Entity, stack: tuple, counter: bool) -> Optional[tuple]:
    """``judge`` for a model that only a lock protects (``@written_with_user_lock``), as the
    runtime checker judges it: transactions and row locks do not count."""
    R = [s for s in ent.scopes if s.kind == "lock"]
    W = [s for s in stack if s.kind == "lock"]
    if not R and not W:
        txns = [s for s in stack if s.kind == "txn"] or [s for s in ent.scopes if s.kind == "txn"]
        return ("TXN106" if counter else "TXN102", ("no-lock", txns[-1] if txns else None))
    if not R:
        return ("TXN101", W[-1])
    w_ids = {id(s) for s in W}
    gone = [s for s in R if id(s) not in w_ids]
    if gone:
        return ("TXN104", ("ended", gone[-1]))
    # the lock is held at the read and at the write; released before an outer commit?
    W = list(stack)
    lock = R[0]
    outer_txn = [s for s in W[:W.index(lock)] if s.kind == "txn"]
    if outer_txn:
        return ("TXN104", ("lock-before-commit", lock, outer_txn[-1]))
    return None


def _fields(relevant: list) -> str:
    seen = []
    for m in relevant:
        if m.attr not in seen:
            seen.append(m.attr)
    return ", ".join(seen)


def _fw(ent: Entity, vocab: Vocab, scope: Optional[Scope] = None) -> str:
    if ent.framework:
        return ent.framework
    if scope is not None and scope.framework:
        return scope.framework
    for fw in ("django", "sqlalchemy", "ndb"):
        if fw in vocab.frameworks and len(vocab.frameworks - {"txnsafety"}) == 1:
            return fw
    return "generic"


def compose(code: str, ent: Entity, w_line: int, verb: str, relevant: list, detail,
            vocab: Vocab) -> str:
    name = ent.name
    r = ent.read_line
    if ent.source == "param":
        src = "came in as a parameter"
    elif ent.source == "call" and ent.via:
        src = f"read by {ent.via} at line {r}"
    elif ent.source == "self":
        src = f"read by the caller of {ent.via}"
    else:
        src = f"read at line {r}"
    if code == "TXN101":
        scope: Scope = detail
        fw = _fw(ent, vocab, scope)
        if scope.kind == "lock":
            fix = (f"re-read it under the lock: `with fetch_under_lock({name}) as {name}:` "
                   f"(or a fresh get inside the block)")
        elif fw == "django":
            fix = "move the read inside the block and lock the row with select_for_update()"
        elif fw == "sqlalchemy":
            fix = "move the read inside the block and lock the row with with_for_update()"
        elif fw == "ndb":
            fix = "move the get inside the transaction"
        else:
            fix = "move the read inside the transaction or lock"
        where = "outside any transaction or lock" if ent.source != "param" else \
            "(read by the caller, outside it)"
        if ent.policy in LOCK_POLICIES and ent.source != "param":
            where = "outside any lock"
        elif ent.policy in TXN_POLICIES and ent.source != "param" and \
                any(s.kind == "lock" for s in ent.scopes):
            model = f"`{ent.model}`" if ent.model else "its model"
            where = f"under a lock but outside any transaction ({model} is declared @{ent.policy})"
        return (f"TXN101 half-protected: `{name}` {src} {where}, {verb} at line {w_line} inside "
                f"`{scope.label}` (line {scope.line}); {fix}")
    if code in ("TXN102", "TXN106") and isinstance(detail, tuple) and detail[0] == "no-lock":
        return _compose_no_lock(code, ent, src, w_line, verb, relevant, detail[1], vocab)
    if code in ("TXN102", "TXN106") and isinstance(detail, tuple) and detail[0] == "no-txn":
        return _compose_no_txn(code, ent, src, w_line, verb, relevant, detail[1], vocab)
    if code in ("TXN102", "TXN106") and detail is None:
        fw = _fw(ent, vocab)
        if code == "TXN106":
            attr, mline = _counter_change(relevant)
            return (f"TXN106 lost-update counter: `{name}.{attr}` changed in Python at line {mline} "
                    f"from the value {src} and {verb} at line {w_line} with no transaction or lock; "
                    f"{_counter_fix(fw, attr)}")
        fix = {"django": "do the read and the save in transaction.atomic() with select_for_update(), "
                         "or save(update_fields=[...]) of values that do not come from the read",
               "sqlalchemy": "read it with with_for_update() and commit before anyone else can, or "
                             "add a version_id_col",
               "ndb": "do the get and the put in one @ndb.transactional function"}.get(
            fw, "hold user_write_lock() (or a transaction with a row lock) around the read and the write")
        return (f"TXN102 unprotected: `{name}` {src}, changed ({_fields(relevant)}) and {verb} at "
                f"line {w_line} with no transaction or lock; {fix}")
    if code == "TXN104":
        kind = detail[0]
        if kind == "released":
            return (f"TXN104 scope-changed: `{name}` read FOR UPDATE at line {r}, but the row lock "
                    f"ended with the commit at line {detail[1]} before it was {verb} at line {w_line}; "
                    f"keep the read and the write in one transaction")
        if kind == "ended":
            scope = detail[1]
            return (f"TXN104 scope-changed: `{name}` {src} inside `{scope.label}` ({scope.where}line "
                    f"{scope.line}) but {verb} at line {w_line} after it ended; do the read and the "
                    f"write inside the same transaction or lock")
        lock, txn = detail[1], detail[2]
        return (f"TXN104 scope-changed: `{name}` {src} and {verb} at line {w_line} under `{lock.label}` "
                f"(line {lock.line}), but the lock is released before `{txn.label}` (line {txn.line}) "
                f"commits, so the next holder can read the old row; take the lock outside the "
                f"transaction or use a transaction-level lock (select_for_update, "
                f"pg_advisory_xact_lock)")
    if code in ("TXN106", "TXN109"):
        scope = detail
        fw = _fw(ent, vocab, scope)
        iso = "READ COMMITTED"
        if code == "TXN106":
            attr, mline = _counter_change(relevant)
            return (f"TXN106 lost-update counter: `{name}.{attr}` changed in Python at line {mline} "
                    f"from the value {src} and {verb} at line {w_line} inside `{scope.label}` "
                    f"(line {scope.line}), which at {iso} does not lock the row; "
                    f"{_counter_fix(fw, attr)}")
        lock = "with_for_update()" if fw == "sqlalchemy" else "select_for_update()"
        return (f"TXN109 weak isolation: `{name}` {src}, changed ({_fields(relevant)}) and {verb} at "
                f"line {w_line} inside `{scope.label}` (line {scope.line}) at {iso} with no row lock "
                f"or version check; read it with {lock} or add a version column")
    return f"{code} {CODES[code].kind}: `{name}` {src}, {verb} at line {w_line}"


def _compose_no_lock(code: str, ent: Entity, src: str, w_line: int, verb: str, relevant: list,
                     txn: Optional[Scope], vocab: Vocab) -> str:
    """TXN102/TXN106 for a model that only a lock protects, written without one."""
    model = f"`{ent.model}`" if ent.model else "its model"
    why = f"without the user write lock ({model} is declared @{ent.policy}"
    if txn is not None:
        why += f", so `{txn.label}` (line {txn.line}) does not protect it"
    why += ")"
    fix = (f"hold user_write_lock() around the read and the write, or re-read it under the lock "
           f"with `with fetch_under_lock({ent.name}) as {ent.name}:`")
    if code == "TXN106":
        attr, mline = _counter_change(relevant)
        fw = _fw(ent, vocab, txn)
        atomic = _counter_fix(fw, attr) if fw in ("django", "sqlalchemy") else \
            "update it atomically in the database"
        return (f"TXN106 lost-update counter: `{ent.name}.{attr}` changed in Python at line {mline} "
                f"from the value {src} and {verb} at line {w_line} {why}; {fix}, or {atomic}")
    return (f"TXN102 unprotected: `{ent.name}` {src}, changed ({_fields(relevant)}) and {verb} at "
            f"line {w_line} {why}; {fix}")


def _compose_no_txn(code: str, ent: Entity, src: str, w_line: int, verb: str, relevant: list,
                    lock: Scope, vocab: Vocab) -> str:
    """TXN102/TXN106 for a model that only a transaction protects, written under a user lock
    but outside any transaction (the lock is named: it is why the code looked safe)."""
    model = f"`{ent.model}`" if ent.model else "its model"
    why = (f"outside any transaction ({model} is declared @{ent.policy}, so `{lock.label}` "
           f"(line {lock.line}) does not protect it)")
    fw = _fw(ent, vocab)
    lock_row = "with_for_update()" if fw == "sqlalchemy" else "select_for_update()"
    fix = f"do the read and the write in one transaction and read the row with {lock_row}"
    if code == "TXN106":
        attr, mline = _counter_change(relevant)
        return (f"TXN106 lost-update counter: `{ent.name}.{attr}` changed in Python at line {mline} "
                f"from the value {src} and {verb} at line {w_line} {why}; {fix}, or "
                f"{_counter_fix(fw, attr)}")
    return (f"TXN102 unprotected: `{ent.name}` {src}, changed ({_fields(relevant)}) and {verb} at "
            f"line {w_line} {why}; {fix}")


def _counter_change(relevant: list) -> tuple[str, int]:
    """(attribute, line) of the counter change among ``relevant`` (TXN106 has one)."""
    change = next(m for m in relevant if m.kind == "counter")
    return change.attr, change.line


def _counter_fix(fw: str, attr: str) -> str:
    if fw == "django":
        return f"update it atomically with F('{attr}') (`.update({attr}=F('{attr}') + n)`)"
    if fw == "sqlalchemy":
        return f"update it atomically with `Model.{attr} + n` (update(Model).values(...))"
    if fw == "ndb":
        return "do the get and the put in one @ndb.transactional function"
    return (f"update it atomically in the database (F('{attr}') + n / Model.{attr} + n) or hold a "
            f"lock around the read and the write")


# ---------------------------------------------------------------- module driver

class ModuleAnalyzer:
    def __init__(self, source: str, tree: Optional[ast.AST], cfg: Config, filename: str = "",
                 prefilter: Optional[Prefilter] = None):
        self.source = source
        self.cfg = cfg
        self.filename = filename
        self.tree = tree
        self.findings: list[Finding] = []
        self.call_sites: list[CallSite] = []
        self.functions: dict[str, FunctionAnalyzer] = {}
        self.function_names: set[str] = set()
        self.module_aliases: set[str] = set()
        self.prefilter = prefilter or Prefilter(cfg)
        self.nested_seen = 0
        self.parsed_functions = 0
        #: module-level functions that may return an entity they read (analysed on demand)
        self.returner_candidates: dict[str, tuple] = {}
        #: (class, method) -> methods that may return an entity they read (``self.get(uid)``)
        self.method_candidates: dict[tuple[str, str], tuple] = {}
        #: (class, method) -> its analyzer, for ``row.method()`` calls on an entity
        self.methods: dict[tuple[str, str], FunctionAnalyzer] = {}
        #: id(function node) -> its analyzer (None: could not be parsed)
        self.analyzed: dict[int, Optional[FunctionAnalyzer]] = {}
        self.busy: set[int] = set()
        #: helpers being analysed on demand, across modules (shared by analyze_project)
        self.demand: list[int] = []
        #: (name, module alias) -> (module, name) of an imported function; set by analyze_project
        self.resolve_external = None
        #: only here for its loader helpers (analyze_project): nothing of its own is analysed
        self.loaders_only = False
        #: resolves sessions made by factories (this module alone, or the project's modules)
        self.session_types: Optional[SessionTypes] = None

    def add(self, f: Finding) -> None:
        self.findings.append(f)

    def policy_of(self, model: Optional[str]) -> Optional[str]:
        """The txnsafety policy of ``model`` as this module knows it (declared here, inherited
        or, under ``txnsafety lint``, imported)."""
        return self.info.policies.get(model) if model else None

    def run(self) -> list[Finding]:
        """Analyse this module on its own (flake8 sees one file at a time)."""
        if not self.prepare():
            return []
        # Alone, a module can only make a session from SQLAlchemy's own names (sessions.py):
        # without one of them in its text, nothing it holds resolves to a session.
        if _SESSION_WORDS.search(self.source):
            self.session_types = SessionTypes({self.filename: self.tree})
        self.analyze()
        self.resolve_calls([self], self.call_sites, lambda site: self.functions.get(site.callee))
        return self.results()

    def prepare(self, loaders: bool = False) -> bool:
        """Cheap stage: is the module worth analysing, and which functions.

        ``loaders``: the module is known not to be relevant; keep it if it may hold helpers
        that return an entity (another module's callers may need them)."""
        pf = self.prefilter
        if loaders or not pf.module_relevant(self.source):
            if not (loaders and "return" in self.source and pf.f_gets.search(self.source)):
                return False
            self.loaders_only = True
        if self.tree is None:
            self.tree = ast.parse(self.source)
        self.info = ModuleInfo(self.tree, self.cfg, self.source)
        self.vocab = vocab_for(self.info.frameworks, self.cfg)
        lines = source_lines(self.source, keepends=True)
        self.picked = []
        self.rest = []
        for fnode, cls in self.info.functions:
            start = min([fnode.lineno] + [d.lineno for d in fnode.decorator_list])
            end = fnode.end_lineno or fnode.lineno
            text = "".join(lines[start - 1:end])
            item = (fnode, cls, start, text)
            if "return" in text and pf.f_gets.search(text):
                if cls is None:
                    self.returner_candidates[fnode.name] = item
                else:
                    self.method_candidates[(cls, fnode.name)] = item
            if self.loaders_only:
                continue
            if fnode.name in self.info.txn_targets or pf.function_relevant(text):
                self.picked.append(item)
                self.function_names.add(fnode.name)
            else:
                self.rest.append(item)
        if self.returner_candidates and self.rest:
            self.pick_callers(_calls_re(self.returner_candidates))
        if self.method_candidates and self.rest:
            self.pick_callers(re.compile(r"\bself\.(?:%s)\(" % "|".join(
                sorted({re.escape(name) for _cls, name in self.method_candidates}))))
        return True

    def pick_callers(self, calls: "re.Pattern[str]") -> None:
        """Also pick the functions that get an entity from a loader helper (``calls``) and
        change and write something."""
        pf = self.prefilter
        keep = []
        for item in self.rest:
            text = item[3]
            if calls.search(text) and pf.f_writes.search(text) and \
                    (pf.mut.search(text) or pf.check.search(text)):
                self.picked.append(item)
                self.function_names.add(item[0].name)
            else:
                keep.append(item)
        self.rest = keep

    def returned_by(self, name: str, alias: Optional[str]) -> Optional[tuple]:
        """(Returned, helper name, file name if another module) for a call of ``name``
        (``alias.name`` for a module imported under ``alias``), if that function returns an
        entity it read."""
        if alias is None and name in self.returner_candidates:
            fa = self.on_demand(name)
            return (fa.returned, name, "") if fa is not None and fa.returned is not None else None
        if self.resolve_external is None or (alias or name) not in self.info.imports:
            return None
        target = self.resolve_external(name, alias)
        if target is None:
            return None
        other, other_name = target
        fa = other.on_demand(other_name)
        if fa is None or fa.returned is None:
            return None
        return fa.returned, name, os.path.basename(other.filename) or "another module"

    def returned_by_method(self, cls: str, name: str) -> Optional[tuple]:
        """Like ``returned_by`` for ``self.name(...)`` in a method of ``cls``: a repository's
        or a view's own loader method (``self.get(uid)``, ``self.load_order()``)."""
        item = self.method_candidates.get((cls, name))
        fa = self.demand_item(item) if item is not None else None
        return (fa.returned, f"self.{name}", "") if fa is not None and fa.returned is not None else None

    def on_demand(self, name: str) -> Optional[FunctionAnalyzer]:
        """The analyzer of loader candidate ``name``, analysing it now if needed (three
        helpers deep at most; a recursive helper is not followed into itself)."""
        item = self.returner_candidates.get(name)
        return self.demand_item(item) if item is not None else None

    def demand_item(self, item: tuple) -> Optional[FunctionAnalyzer]:
        key = id(item[0])
        if key in self.analyzed:
            return self.analyzed[key]
        if key in self.busy or len(self.demand) >= 3:
            return None
        self.demand.append(key)
        try:
            return self.analyze_function(*item)
        finally:
            self.demand.pop()

    def helper_names(self) -> set[str]:
        """Module-level functions that other modules may call: the picked ones and the
        functions that call them (three levels, by text)."""
        names = {fnode.name for fnode, cls, _s, _t in self.picked if cls is None}
        wanted = set(names) | {fnode.name for fnode, _c, _s, _t in self.picked}
        rest = [it for it in self.rest if it[1] is None]
        for _round in range(3):
            if not wanted or not rest:
                break
            calls = re.compile(r"\b(?:%s)\(" % "|".join(sorted(re.escape(n) for n in wanted)))
            wanted = {it[0].name for it in rest if calls.search(it[3])}
            names |= wanted
            rest = [it for it in rest if it[0].name not in wanted]
        return names

    def analyze(self, external: Optional[set[str]] = None,
                loader_calls: Optional["re.Pattern[str]"] = None) -> None:
        """libcst stage.  ``external``: names imported from other modules that are helpers;
        ``loader_calls``: calls of other modules' loader helpers."""
        if self.loaders_only:
            return
        self.function_names |= set(external or ())
        if loader_calls is not None and self.rest:
            self.pick_callers(loader_calls)
        for fnode, cls, start, text in self.picked:
            self.analyze_function(fnode, cls, start, text)
        # then the callers of helpers whose summary matters: under a lock, or holding a read
        wanted = set(external or ()) | {
            name for name, fa in self.functions.items()
            if fa.param_writes or fa.rmw_getters or fa.deferred}
        for _round in range(3):            # callers, their callers, and theirs
            if not wanted or not self.rest:
                break
            calls = re.compile(r"\b(?:%s)\(" % "|".join(sorted(re.escape(n) for n in wanted)))
            keep, wanted = [], set()
            for item in self.rest:
                if calls.search(item[3]):
                    self.analyze_function(*item)
                    wanted.add(item[0].name)
                    self.function_names.add(item[0].name)
                else:
                    keep.append(item)
            self.rest = keep

    def results(self) -> list[Finding]:
        seen = set()
        out = []
        for f in sorted(self.findings, key=Finding.sort_key):
            k = (f.line, f.code)
            if k not in seen:
                seen.add(k)
                out.append(f)
        return out

    def analyze_function(self, fnode, cls, start: int, text: str) -> Optional[FunctionAnalyzer]:
        """Analyse one function (once: a loader helper may have been analysed on demand)."""
        key = id(fnode)
        if key in self.analyzed or key in self.busy:
            return self.analyzed.get(key)
        self.busy.add(key)
        try:
            fa = self._analyze_function(fnode, cls, start, text)
        finally:
            self.busy.discard(key)
        self.analyzed[key] = fa
        return fa

    def _analyze_function(self, fnode, cls, start: int, text: str) -> Optional[FunctionAnalyzer]:
        indented = text[:1] in (" ", "\t")
        src = ("if 1:\n" + text) if indented else text
        offset = start - 1 - (1 if indented else 0)
        try:
            module = cst.parse_module(src)
        except Exception:
            return None
        wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        positions = _Positions(wrapper.resolve(ByteSpanPositionProvider), src)
        fdef = module.body[0]
        if indented:
            fdef = fdef.body.body[0]
        if not isinstance(fdef, cst.FunctionDef):
            return None
        self.parsed_functions += 1
        qual = f"{cls}.{fnode.name}" if cls else fnode.name
        fa = FunctionAnalyzer(self, fdef, positions, offset, qual, is_method=cls is not None)
        fa.run()
        self.functions.setdefault(fnode.name, fa)
        if cls is not None:
            self.methods[(cls, fnode.name)] = fa
        return fa

    @staticmethod
    def resolve_calls(modules: list, call_sites: list, lookup, complete=None) -> None:
        """Join call sites to the functions they call (``lookup(site)`` finds the callee).
        ``complete(callee, n)``: whether ``n`` resolved calls are all the calls there are."""
        callers: dict[int, list[CallSite]] = {}
        analyzers: dict[int, FunctionAnalyzer] = {}
        # a helper's helpers count as its own: propagate re-read-and-write summaries up
        resolved = [(site, lookup(site)) for site in call_sites]
        for _round in range(4):
            changed = False
            for site, callee in resolved:
                if callee is None or callee is site.caller or site.caller.outer is not None:
                    continue
                for getter, lines in callee.rmw_getters.items():
                    if getter not in site.caller.inherited_rmw and getter not in site.caller.rmw_getters:
                        site.caller.inherited_rmw[getter] = lines
                        changed = True
                for getter, lines in callee.inherited_rmw.items():
                    if getter not in site.caller.inherited_rmw and getter not in site.caller.rmw_getters:
                        site.caller.inherited_rmw[getter] = lines
                        changed = True
            if not changed:
                break
        for site, callee in resolved:
            if callee is None or callee is site.caller:
                continue
            callers.setdefault(id(callee), []).append(site)
            analyzers[id(callee)] = callee
            mod = site.caller.mod
            mod._param_writes(site, callee)
            mod._internal(site, callee)
        # an unprotected helper whose every caller calls it under protection (directly, or
        # because the caller itself is only ever called under protection) is fine
        memo: dict[tuple[int, str], bool] = {}

        def protected(fa: FunctionAnalyzer, need: str, visiting: frozenset) -> bool:
            key = (id(fa), need)
            if key in memo:
                return memo[key]
            if id(fa) in visiting:
                return False
            sites = callers.get(id(fa), [])
            if fa.is_method and complete is not None and not complete(fa, len(sites)):
                memo[key] = False
                return False        # a call the analysis did not see may hold no protection
            ok = bool(sites) and all(
                (any(sc.kind == need for sc in site.stack) if need in ("txn", "lock")
                 else bool(site.stack))
                or protected(site.caller, need, visiting | {id(fa)})
                for site in sites)
            memo[key] = ok
            return ok

        for mod in modules:
            for fa in mod.functions.values():
                for finding, need in fa.deferred:
                    if not protected(fa, need, frozenset()):
                        mod.findings.append(finding)
                fa.deferred = []

    def _param_writes(self, site: CallSite, callee: FunctionAnalyzer) -> None:
        order = [p for p in callee.param_order]
        if callee.is_method and order and order[0] == "self":
            order = order[1:]
        pairs = list(site.args)
        if site.receiver is not None and "self" in callee.param_writes:
            pairs.append(("self", site.receiver))
        for key, ent in pairs:
            pname = key if isinstance(key, str) else (order[key] if key < len(order) else None)
            if pname is None or pname not in callee.param_writes:
                continue
            if ent.source == "param":
                continue
            w_line, relevant, _kind = callee.param_writes[pname]
            result = judge(ent, site.stack, relevant, self.vocab)
            if result is None:
                continue
            code, detail = result
            where = "line" if callee.mod is self else \
                f"{os.path.basename(callee.mod.filename) or 'another module'} line"
            verb = f"written by `{callee.name}()` ({where} {w_line}) called"
            msg = compose(code, ent, site.line, verb, relevant, detail, self.vocab)
            if self.cfg.code_enabled(code):
                blind = all(m.kind == "blind" for m in relevant)
                self.add(Finding(site.line, site.col, code, msg,
                                 confidence=Confidence.LOW if blind else Confidence.HIGH))

    def _internal(self, site: CallSite, callee: FunctionAnalyzer) -> None:
        summary = {**callee.inherited_rmw, **callee.rmw_getters}
        if not summary:
            return
        for ent in site.live:
            if ent.getter not in summary:
                continue
            later = [w for w in ent.writes if w > site.line]
            if ent.read_line < site.line and later and ent.had_rmw:
                hr, hw = summary[ent.getter]
                where = "lines" if callee.mod is self else \
                    f"{os.path.basename(callee.mod.filename) or 'another module'} lines"
                if self.cfg.code_enabled("TXN103"):
                    self.add(Finding(later[0], 0, "TXN103", (
                        f"TXN103 internal: `{ent.name}` read at line {ent.read_line} and "
                        f"written at line {later[0]}, but `{callee.name}()` called at line {site.line} "
                        f"reads and writes the same `{ent.getter}` row as another object ({where} "
                        f"{hr}/{hw}), and one write erases the other; pass `{ent.name}` to the helper "
                        f"instead of re-reading")))
                return


#: What a module must mention to make a SQLAlchemy session on its own (``sessionmaker``,
#: ``async_sessionmaker``, ``scoped_session``, ``async_scoped_session``, ``Session(...)``).
_SESSION_WORDS = re.compile(r"sessionmaker|scoped_session|Session")


def _calls_re(names) -> "re.Pattern[str]":
    """Calls of module-level functions ``names`` (not methods of the same name)."""
    return re.compile(r"(?<![\w.])(?:%s)\(" % "|".join(sorted(re.escape(n) for n in names)))


def analyze_source(source: str, cfg: Optional[Config] = None, filename: str = "",
                   tree: Optional[ast.AST] = None,
                   prefilter: Optional[Prefilter] = None) -> list[Finding]:
    """Findings for one module's source.  Raises SyntaxError if it does not parse."""
    cfg = cfg or Config()
    if _WRAPPER_HINT.search(source):
        if tree is None:
            tree = ast.parse(source)
        cfg = with_wrappers(cfg, [(source, tree)])
    mod = ModuleAnalyzer(source, tree, cfg, filename, prefilter)
    findings = mod.run()
    return [dataclasses.replace(f, path=filename) for f in findings]


# ---------------------------------------------------------------- whole project (CLI)

def _module_names(path: str, roots: Sequence[str]) -> list[str]:
    import os
    names = []
    ap = os.path.abspath(path)
    for root in roots:
        r = os.path.abspath(root)
        if os.path.isfile(r):
            r = os.path.dirname(r)
        for base in (r, os.path.dirname(r)):
            if ap.startswith(base + os.sep):
                rel = os.path.relpath(ap, base)[:-3].replace(os.sep, ".")
                if rel.endswith(".__init__"):
                    rel = rel[: -len(".__init__")]
                names.append(rel)
    return names


def analyze_project(files: Sequence[tuple[str, str, ast.AST]], cfg: Optional[Config] = None,
                    roots: Sequence[str] = (), prefilter: Optional[Prefilter] = None
                    ) -> dict[str, list[Finding]]:
    """Analyse many modules and join calls between them (``from x import helper``).

    What crosses modules, always through imports (``from x import name``, ``from pkg import
    module`` + ``module.name``, relative imports): helpers that write or re-read an entity,
    helpers that return an entity they read, versioned models and model policies (also
    through re-exports and subclasses)."""
    cfg = with_wrappers(cfg or Config(), [(source, tree) for _path, source, tree in files])
    prefilter = prefilter or Prefilter(cfg)
    mods: dict[str, ModuleAnalyzer] = {}
    facts: dict[str, object] = {}            # path -> ModuleInfo or ModuleFacts
    index: dict[str, str] = {}               # dotted module name (and its suffixes) -> path
    dotted_of: dict[str, str] = {}
    demand: list[int] = []                   # loader helpers being analysed, across modules
    skipped: dict[str, tuple[str, ast.AST]] = {}
    for path, source, tree in files:
        m = ModuleAnalyzer(source, tree, cfg, path, prefilter)
        if m.prepare():
            mods[path] = m
            m.demand = demand
            facts[path] = m.info
        else:
            skipped[path] = (source, tree)
            facts[path] = ModuleFacts(tree)
    # analysed modules take a shared suffix first, as they always did
    for path in sorted(facts, key=lambda p: p not in mods):
        for name in _module_names(path, roots or ["."]):
            dotted_of.setdefault(path, name)
            parts = name.split(".")
            for i in range(len(parts)):
                index.setdefault(".".join(parts[i:]), path)

    def resolve(path: str, alias: str, as_module: bool = False) -> Optional[tuple[str, str]]:
        imports = facts[path].imports
        if alias not in imports:
            return None
        modname, name, level = imports[alias]
        if as_module:                       # ``from pkg import services``
            modname, name = (modname + "." + name) if modname else name, ""
        if level:
            here = dotted_of.get(path, "")
            parts = here.split(".") if here else []
            is_pkg = path.endswith("__init__.py")
            base = parts if is_pkg else parts[:-1]
            if level - 1:
                base = base[: -(level - 1)] if len(base) >= level - 1 else []
            modname = ".".join(base + ([modname] if modname else []))
        other = index.get(modname)
        if other is None or other == path:
            return None
        return other, name

    def target(m: ModuleAnalyzer, alias: str, as_module: bool = False
               ) -> Optional[tuple[ModuleAnalyzer, str]]:
        t = resolve(m.filename, alias, as_module)
        if t is None or t[0] not in mods:
            return None
        return mods[t[0]], t[1]

    # a module that only reads (skipped above) may hold loader helpers that an analysed
    # module imports and calls: keep those modules too (for their loaders only)
    for path in [p for p in mods if not mods[p].loaders_only]:
        source = mods[path].source
        for alias in facts[path].imports:
            if alias + "(" not in source and alias + "." not in source:
                continue
            for as_module in (False, True):
                t = resolve(path, alias, as_module)
                if t is not None and t[0] in skipped:
                    other_source, other_tree = skipped.pop(t[0])
                    other = ModuleAnalyzer(other_source, other_tree, cfg, t[0], prefilter)
                    if other.prepare(loaders=True):
                        mods[t[0]] = other
                        other.demand = demand
                        other.info.versioned |= facts[t[0]].versioned
                        for name, policy in facts[t[0]].policies.items():
                            other.info.policies.setdefault(name, policy)
                        facts[t[0]] = other.info
    _share_models(facts, resolve, cfg.versioned_models)
    helpers = {id(m): m.helper_names() for m in mods.values()}

    def resolver(m: ModuleAnalyzer):
        def resolve_external(name: str, alias: Optional[str]) -> Optional[tuple]:
            if alias is not None:
                t = target(m, alias, as_module=True)
                return (t[0], name) if t is not None else None
            return target(m, name)
        return resolve_external

    session_types = SessionTypes({path: tree for path, _source, tree in files},
                                 lambda path, alias, as_module: resolve(path, alias, as_module))
    plans = []
    for m in mods.values():
        m.session_types = session_types
        m.resolve_external = resolver(m)
        external = set()
        loaders = set()
        for alias in m.info.imports:
            t = target(m, alias)
            if t is not None:
                if t[1] in helpers[id(t[0])]:
                    external.add(alias)
                if t[1] in t[0].returner_candidates:
                    loaders.add(re.escape(alias) + r"\(")
            t = target(m, alias, as_module=True)
            if t is not None:
                if helpers[id(t[0])]:
                    m.module_aliases.add(alias)
                    external |= helpers[id(t[0])]
                if t[0].returner_candidates:
                    loaders.add(re.escape(alias) + r"\.(?:%s)\(" % "|".join(
                        sorted(re.escape(n) for n in t[0].returner_candidates)))
        m.function_names |= external
        plans.append((m, external, re.compile(r"(?<![\w.])(?:%s)" % "|".join(sorted(loaders)))
                      if loaders else None))
    for m, external, loader_calls in plans:
        m.analyze(external, loader_calls)
    sites = [site for m in mods.values() for site in m.call_sites]

    def lookup(site: CallSite):
        m = site.caller.mod
        if site.module_alias is not None:
            t = target(m, site.module_alias, as_module=True)
            return t[0].functions.get(site.callee) if t is not None else None
        local = m.functions.get(site.callee)
        if local is not None:
            return local
        if site.callee in m.info.imports:
            t = target(m, site.callee)
            if t is not None:
                return t[0].functions.get(t[1])
        return method_of(site)

    def method_of(site: CallSite) -> Optional[FunctionAnalyzer]:
        """``row.method()`` on an entity: the model method of that name, by the row's model
        when known, else the only model class in the project that defines it."""
        if site.receiver is None or site.module_alias is not None:
            return None
        found = methods.get(site.callee, [])
        model = site.receiver.model
        if model is not None:
            found = [(cls, fa) for cls, fa in found if cls == model]
        return found[0][1] if len(found) == 1 else None

    methods: dict[str, list[tuple[str, FunctionAnalyzer]]] = {}
    for m in mods.values():
        for (cls, name), fa in m.methods.items():
            if "self" in fa.param_writes and m.info.is_model_class(cls):
                methods.setdefault(name, []).append((cls, fa))
    calls_seen = _method_callers(mods, methods, sites, files) if methods else {}
    ModuleAnalyzer.resolve_calls(list(mods.values()), sites, lookup,
                                 complete=lambda fa, n: calls_seen.get(fa.name, n) <= n)
    out = {}
    for path, m in mods.items():
        if m.loaders_only and not m.findings:
            continue
        out[path] = [dataclasses.replace(f, path=path) for f in m.results()]
    return out


def _method_callers(mods: dict, methods: dict, sites: list, files: Sequence) -> dict[str, int]:
    """Analyse the functions that call a row-writing model method (``row.verify(t)``) so
    their calls are judged, and count the calls the project's text holds: a method's own
    finding is dropped for protected callers only when every call was seen."""
    pattern = re.compile(r"\.(%s)\(" % "|".join(sorted(re.escape(n) for n in methods)))
    for m in mods.values():
        if m.loaders_only or not m.rest:
            continue
        keep = []
        for item in m.rest:
            if pattern.search(item[3]):
                before = len(m.call_sites)
                m.analyze_function(*item)
                sites.extend(m.call_sites[before:])
            else:
                keep.append(item)
        m.rest = keep
    counts: dict[str, int] = {}
    for _path, source, _tree in files:
        for found in pattern.finditer(source):
            counts[found.group(1)] = counts.get(found.group(1), 0) + 1
    return counts


def _share_models(facts: dict, resolve, configured: set) -> None:
    """Versioned models and model policies cross modules through imports: ``from .models
    import Doc``, ``from app import models`` (+ ``models.Doc``), re-exports and subclasses of
    a versioned (or policy-declaring) base.  A fixpoint over the import graph; nothing to do
    when no module declares either (configured ``versioned-models`` apply everywhere
    already)."""
    own = {path: set(f.versioned) - configured for path, f in facts.items()}
    policies = {path: f.policies for path, f in facts.items()}
    if not any(own.values()) and not any(policies.values()):
        return
    # each import resolved once: (alias, module path, name) or (alias, module path, None)
    links: dict[str, list] = {}
    for path, f in facts.items():
        out = links[path] = []
        for alias in f.imports:
            t = resolve(path, alias)
            if t is not None:
                out.append((alias, t[0], t[1]))
            t = resolve(path, alias, as_module=True)
            if t is not None:
                out.append((alias, t[0], None))
    for _round in range(8):
        changed = False
        for path, f in facts.items():
            mine, mine_p = own[path], policies[path]
            for alias, other, name in links[path]:
                if name is not None:
                    if alias not in mine and name in own[other]:
                        mine.add(alias)
                        changed = True
                    if alias not in mine_p and name in policies[other]:
                        mine_p[alias] = policies[other][name]
                        changed = True
                    continue
                # ``models.Doc``: the analysis knows a model by its last name
                new = own[other] - mine - set(f.class_bases)
                if new and alias not in mine:
                    mine |= new
                    changed = True
                for model, policy in policies[other].items():
                    if model not in mine_p and model not in f.class_bases:
                        mine_p[model] = policy
                        changed = True
            if inherit_versioned(mine, f.class_bases):
                changed = True
            if inherit_policies(mine_p, f.class_bases):
                changed = True
        if not changed:
            break
    for path, f in facts.items():
        f.versioned |= own[path]
