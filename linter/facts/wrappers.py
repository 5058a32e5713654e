"""A project's own transactions: context managers and decorators that open one.

Real code rarely writes ``transaction.atomic()`` at every call site.  It wraps it::

    @contextmanager
    def locked_account(pk):            # a context manager whose body opens a transaction
        with transaction.atomic():
            yield Account.objects.select_for_update().get(pk=pk)

    def in_transaction(func):          # a decorator whose wrapper calls func inside one
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with db.session.begin():
                return func(*args, **kwargs)
        return wrapper

    def conditional_atomic(condition):  # a factory that returns one
        return transaction.atomic() if condition else contextlib.nullcontext()

A ``with locked_account(pk):`` block or an ``@in_transaction`` function runs inside
the transaction, so the linter treats these names as transactions (as if listed in
``transactions``).  Wrappers of wrappers count too, at any depth and across modules: a
context manager whose ``yield`` sits inside ``with locked_account(pk):``, or a decorator whose
wrapper calls the function inside ``with in_txn():``, opens the same transaction.  Each
file keeps which names its context managers and decorators open (``FileFacts.openers``),
and the project's wrappers are found from them to a fixed point (``_wrappers_of_wrappers``).
Found from the ``ast`` alone; under ``txnsafety lint`` the names are collected over every
file first, so a wrapper declared in ``utils.py`` counts in ``views.py``.
"""
from __future__ import annotations

import ast
import dataclasses
import re
from typing import Iterable, Optional, Sequence

from .config import LOCKS, TRANSACTIONS, Config, name_matches
from .constraints import bound_classes, class_bases, declared_models, inherit_keys, manager_attributes, unique_keys
from .relations import finish as finish_relations, merge as merge_relations, relations
from .tree_nodes import TreeNodes, tree_nodes

_CONTEXT_MANAGER_DECORATORS = {"contextmanager", "asynccontextmanager"}
#: cheap text test before any walk: a wrapper must name a transaction or a lock
_HINT = re.compile(r"atomic|begin|transaction|lock")


def _dotted(node: ast.AST) -> str:
    parts = []
    while True:
        if isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Name):
            parts.append(node.id)
            break
        else:
            break
    return ".".join(reversed(parts))


def _opening_withs(func: ast.AST, names: Optional[frozenset[str]]) -> Iterable[ast.AST]:
    """``with`` statements in ``func`` (not in nested functions) that open one of ``names``
    (None: every ``with``)."""
    stack = list(getattr(func, "body", []))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.With, ast.AsyncWith)) and (names is None or any(
                name_matches(_dotted(item.context_expr), names) for item in node.items)):
            yield node
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                stack.append(child)


def _contains(node: ast.AST, kinds: tuple) -> bool:
    return any(isinstance(n, kinds) for n in ast.walk(node))


def _calls_param(node: ast.AST, params: set[str]) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in params
               for n in ast.walk(node))


def _returns_one(func: ast.AST, names: frozenset[str]) -> bool:
    """``return transaction.atomic(using=db) if cond else nullcontext()``: a factory of one."""
    stack = list(getattr(func, "body", []))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return) and node.value is not None and any(
                isinstance(c, ast.Call) and name_matches(_dotted(c), names) for c in ast.walk(node.value)):
            return True
        stack.extend(c for c in ast.iter_child_nodes(node)
                     if not isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)))
    return False


def _is_wrapper(func: ast.FunctionDef | ast.AsyncFunctionDef, names: frozenset[str]) -> bool:
    if _returns_one(func, names):
        return True
    return bool(_wrapping_withs(func, names))


def _wrapping_withs(func: ast.FunctionDef | ast.AsyncFunctionDef, names: Optional[frozenset[str]]) -> list:
    """The ``with`` statements that make ``func`` a wrapper of what they open (of ``names``;
    None: of anything): a context manager's ``with`` around its ``yield``, or a decorator's
    (or decorator factory's) ``with`` in which the wrapper calls the wrapped function, a
    parameter of an enclosing function."""
    decorators = {_dotted(d).rsplit(".", 1)[-1] for d in func.decorator_list}
    if decorators & _CONTEXT_MANAGER_DECORATORS:
        return [w for w in _opening_withs(func, names) if _contains(w, (ast.Yield, ast.YieldFrom))]
    nested = [n for n in ast.walk(func) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n is not func]
    params = {a.arg for f in [func] + nested for a in f.args.args + f.args.posonlyargs + f.args.kwonlyargs}
    return [w for c in nested for w in _opening_withs(c, names) if _calls_param(w, params)]


#: cheap text test before the walk for openers: an indented ``with`` and a ``yield`` or a nested ``def``
_OPENER_HINT = re.compile(r"^[ \t]+(?:async[ \t]+)?with\b", re.M)
_OPENER_SHAPE = re.compile(r"\byield\b|^[ \t]+(?:async[ \t]+)?def\b", re.M)


def openers(text: str, tree: ast.AST) -> tuple[tuple[str, frozenset[str]], ...]:
    """The module's context managers and decorators with the names their wrapping ``with``
    statements open, whatever those are (``in_txn`` -> ``{"locked_account"}``): what a
    project-wide fixed point needs to find wrappers of the project's own wrappers."""
    if not _OPENER_HINT.search(text) or not _OPENER_SHAPE.search(text):
        return ()
    found = []
    for func in tree_nodes(tree).functions:
        opened = frozenset(n for w in _wrapping_withs(func, None) for item in w.items
                           if (n := _dotted(item.context_expr)))
        if opened:
            found.append((func.name, opened))
    return tuple(sorted(found, key=lambda pair: pair[0]))


def _wrappers_of_wrappers(txns: set[str], locks: set[str], txn_names: frozenset[str],
                          lock_names: frozenset[str], all_openers: Sequence[tuple[str, frozenset[str]]]) -> None:
    """Add to ``txns`` and ``locks`` the functions that open one of them (or a preset), to a
    fixed point: a wrapper of a wrapper of ``atomic()`` is a transaction too."""
    changed = True
    while changed:
        changed = False
        known_txns, known_locks = txn_names | txns, lock_names | locks
        for name, opened in all_openers:
            if name not in txns and any(name_matches(n, known_txns) for n in opened):
                txns.add(name)
                changed = True
            elif name not in locks and name not in txns and any(name_matches(n, known_locks) for n in opened):
                locks.add(name)
                changed = True


def _may_open(nodes: TreeNodes, names: frozenset[str]) -> bool:
    """Whether the module has a ``with`` item or a returned call naming one of ``names``:
    every kind of wrapper needs one, and most modules have neither."""
    return any(name_matches(_dotted(item.context_expr), names) for w in nodes.withs for item in w.items) or \
        any(r.value is not None and any(isinstance(c, ast.Call) and name_matches(_dotted(c), names)
                                        for c in ast.walk(r.value)) for r in nodes.returns)


def _wrappers(tree: ast.AST, names: frozenset[str]) -> set[str]:
    nodes = tree_nodes(tree)
    if not _may_open(nodes, names):
        return set()
    return {node.name for node in nodes.functions if _is_wrapper(node, names)}


def _preset(table: dict[str, set[str]], extra: set[str]) -> frozenset[str]:
    out = set(extra)
    for names in table.values():
        out |= names
    return frozenset(out)


def _commits(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "commit"
               for n in ast.walk(node))


def _is_session_scope(func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A unit of work that commits on the way out: a context manager that yields (a
    session) and commits after its ``yield``, or a decorator whose wrapper calls the wrapped
    function (handing it a session) and commits::

        @contextmanager
        def session_scope():                  def with_session(f):
            session = SessionLocal()              @wraps(f)
            try:                                  def wrapper(*args, **kwargs):
                yield session                         with session_scope() as session:
                session.commit()                          result = f(session, *args, **kwargs)
            except Exception:                             session.commit()
                session.rollback()                        return result
                raise                             return wrapper

    What the block or the decorated function changes is flushed at that commit, in one
    transaction (a weak one: it protects nothing it did not lock)."""
    decorators = {_dotted(d).rsplit(".", 1)[-1] for d in func.decorator_list}
    if decorators & _CONTEXT_MANAGER_DECORATORS:
        return _contains(func, (ast.Yield, ast.YieldFrom)) and _commits(func)
    nested = [n for n in ast.walk(func) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n is not func]
    params = {a.arg for a in func.args.args + func.args.posonlyargs + func.args.kwonlyargs}
    return any(_calls_param(n, params) and _commits(n) for n in nested)


def _session_scopes(text: str, tree: ast.AST) -> set[str]:
    if "commit(" not in text:
        return set()
    return {node.name for node in tree_nodes(tree).functions if _is_session_scope(node)}


def project_wrappers(sources: Iterable[tuple[str, ast.AST]], cfg: Config) -> tuple[set[str], set[str]]:
    """(transaction wrappers, lock wrappers) declared in ``sources`` (text, tree) pairs;
    a unit of work that commits on its way out (``_is_session_scope``) is a transaction."""
    txn_names = _preset(TRANSACTIONS, cfg.transactions | cfg.retrying_transactions)
    lock_names = _preset(LOCKS, cfg.locks)
    txns: set[str] = set()
    locks: set[str] = set()
    for text, tree in sources:
        txns |= _session_scopes(text, tree)
        if not _HINT.search(text):
            continue
        txns |= _wrappers(tree, txn_names)
        locks |= _wrappers(tree, lock_names)
    return txns, locks


@dataclasses.dataclass(frozen=True)
class FileFacts:
    """What one file adds to the project's configuration: the transaction and lock wrappers
    it declares (wrappers.py), its models' unique keys (constraints.py) and relations
    (relations.py).  Plain data, so
    the project index keeps it by the file's content and an edit recomputes only its own."""

    transactions: frozenset[str] = frozenset()
    locks: frozenset[str] = frozenset()
    unique_keys: tuple[tuple[str, tuple[frozenset[str], ...]], ...] = ()
    #: manager attributes its models declare besides ``objects``
    managers: frozenset[str] = frozenset()
    #: model -> its relation attributes, reverse sides included (relations.py)
    relations: tuple[tuple[str, frozenset[str]], ...] = ()
    #: class -> its bases' names: unique keys pass to subclasses (constraints.inherit_keys)
    bases: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: context managers and decorators -> the names they open (``openers``): wrappers of wrappers
    openers: tuple[tuple[str, frozenset[str]], ...] = ()
    #: CamelCase names bound to a call's result at module level (``User = get_user_model()``)
    bound: frozenset[str] = frozenset()


def file_facts(source: str, tree: ast.AST, cfg: Config) -> FileFacts:
    """The :class:`FileFacts` of one module (the per-file part of ``with_wrappers``)."""
    txns, locks = project_wrappers([(source, tree)], cfg)
    keys = unique_keys([(source, tree)])
    return FileFacts(frozenset(txns), frozenset(locks),
                     tuple((model, tuple(found)) for model, found in keys.items()),
                     manager_attributes([(source, tree)]),
                     tuple(sorted(relations([(source, tree)]).items())),
                     tuple(sorted(class_bases(tree).items())), openers(source, tree),
                     bound_classes(tree))


def project_config(cfg: Config, facts: Sequence[FileFacts]) -> Config:
    """``cfg`` plus what the files' facts declare, in the files' order (unique keys of a
    model declared twice keep that order); the index stores the facts per file."""
    txns: set[str] = set()
    locks: set[str] = set()
    keys: dict[str, list] = {}
    managers: set[str] = set()
    related: dict[str, set[str]] = {}
    bases: dict[str, tuple[str, ...]] = {}
    all_openers: list[tuple[str, frozenset[str]]] = []
    bound: set[str] = set()
    for f in facts:
        bases.update(f.bases)
        bound |= f.bound
        txns |= f.transactions
        locks |= f.locks
        managers |= f.managers
        all_openers.extend(f.openers)
        merge_relations(related, f.relations)
        for model, found in f.unique_keys:
            keys.setdefault(model, []).extend(found)
    if all_openers:
        _wrappers_of_wrappers(txns, locks, _preset(TRANSACTIONS, cfg.transactions | cfg.retrying_transactions),
                              _preset(LOCKS, cfg.locks), all_openers)
    models = declared_models(bases)
    if not txns and not locks and not keys and not managers and not related and not bases:
        return cfg
    merged = dict(cfg.unique_keys)
    for model, found in keys.items():
        merged[model] = merged.get(model, []) + found
    inherit_keys(merged, bases)
    return dataclasses.replace(cfg, transactions=cfg.transactions | txns, locks=cfg.locks | locks,
                               unique_keys=merged, managers=cfg.managers | managers,
                               declared_models=cfg.declared_models | models,
                               defined_classes=cfg.defined_classes | frozenset(bases) | bound,
                               relations=finish_relations(related) or cfg.relations)


def with_wrappers(cfg: Config, sources: Iterable[tuple[str, ast.AST]]) -> Config:
    """``cfg`` extended with what ``sources`` declare (a copy; ``cfg`` untouched): their
    transaction and lock wrappers, and their models' unique keys and managers (constraints.py)."""
    return project_config(cfg, [file_facts(text, tree, cfg) for text, tree in sources])
