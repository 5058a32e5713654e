"""Whether any code computes an attribute from its own old value: read from the source.

A number written by a partial write looks the same whether it was computed from the
value loaded (``line.quantity += n``: two requests racing lose one increment) or not
(a quantity typed in a form, a position in a list: a blind write, the last writer
wins by design).  The values cannot tell; the code that assigns the attribute can.
So a number (or a date that is not "now") that changed, and a value equal to the one
loaded but a new object (assigned by code, not left stale: see
:func:`txnsafety.values.vouched_by_code`), is taken as derived from the read only when
some code assigns that attribute from itself:

* ``x.n += k`` (any augmented assignment of the attribute);
* ``x.n = <expr>`` / ``setattr(x, "n", <expr>)`` where ``<expr>`` reads ``.n`` *of the
  same receiver* (``x.n + 1``, ``max(x.n, m)``, ``getattr(x, "n")``), a local computed
  from it (``n = x.n; ...; x.n = n + 1``), or hands ``x`` itself to a call
  (``x.n = total(x)``, ``x.n = x.recount()``): the callee may read it.

The receiver is compared as written (``self`` with ``self``, ``order.line`` with
``order.line``): ``person.weight = self.weight.data`` (a form's field of the same name)
or ``user.name = user_in.name`` (a schema's) reads another object's attribute and is a
blind write.  A derivation through an alias of the receiver (``p = x; x.n = p.n + 1``)
is not seen: where the checker cannot see the flow, the write counts as blind.

The code searched is every module of the application loaded so far (files that are
not a library's, :func:`txnsafety.sites.is_library_file`) and the loaded modules of
the package that defines the written model (a third-party app's own counters), among
them the files that name the model or one of its own bases (an identifier, an
attribute, an import, a class definition, a string): an attribute name is shared by
many models, and ``row.Value = encrypt(row.Value)`` on a gateway's options says nothing
of a token's ``Value`` in a module that never names tokens.  A derivation in a generic
helper that names no model (``def bump(obj): obj.n += 1``) is therefore not seen.  Each
file is parsed once; the names it derives and the names it mentions are kept per file,
and per model the union is rebuilt only when more modules have been loaded.  A name no such code derives —
set from a form through ``setattr(obj, name, value)``, from a list index, by a
serializer — is written blind.  Not seen: a derivation through a dynamic attribute
name (``setattr(x, f, getattr(x, f) + 1)``) or in code loaded with ``exec``.
"""
from __future__ import annotations

import ast
import logging
import sys
import tokenize
from typing import Any, Iterable, Iterator

from .sites import is_library_file

log = logging.getLogger("txnsafety")

#: filename -> (the attribute names its code assigns from themselves, the names the file
#: mentions: identifiers, attributes, imports) (parsed once).
_files: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
#: model class -> (len(sys.modules) when built, names derived by the code searched for it).
_models: dict[Any, tuple[int, frozenset[str]]] = {}
#: ``known_derivations(model) -> (len(sys.modules) when built, names derived) | None``: the cache
#: :func:`derived_somewhere` answers from, its own bound ``get`` (no Python frame), for a per-write
#: quick path that asks several names at once (valid while ``len(sys.modules)`` is the same).
known_derivations = _models.get


def derived_somewhere(model: type, name: str) -> bool:
    """True when code of the application (or of the model's own package) assigns
    attribute ``name`` from its own value (see the module's docstring)."""
    seen = len(sys.modules)
    known = _models.get(model)
    if known is None or known[0] != seen:
        try:
            known = _models[model] = (seen, _names_for(model))
        except Exception:  # never break a write over this: assume the worst
            log.exception("txnsafety: could not read the code assigning %s", name)
            return True
    return name in known[1]


def forget() -> None:
    """Drop what was read (tests that write modules at run time)."""
    _files.clear()
    _models.clear()


def _names_for(model: type) -> frozenset[str]:
    """The attributes derived by files that name ``model`` (or a class it inherits from):
    an attribute name is shared by many models (``Value``, ``count``), so a file that
    derives ``option.Value`` of another model says nothing about this one's."""
    names: set[str] = set()
    classes = _class_names(model)
    for filename in _files_for(model):
        found = _files.get(filename)
        if found is None:
            found = _files[filename] = _derived_in_file(filename)
        derived, mentioned = found
        if derived and not classes.isdisjoint(mentioned):
            names |= derived
    return frozenset(names)


def _class_names(model: type) -> frozenset[str]:
    """The names code may use for ``model``: its own (Django's ``User`` too) and its
    application bases' (a method of a base class or a mixin derives for every subclass),
    not the frameworks' base classes (``Model``, ``AbstractUser``)."""
    return frozenset({model.__name__}) | frozenset(
        cls.__name__ for cls in getattr(model, "__mro__", ())[1:]
        if (getattr(cls, "__module__", "") or "").split(".")[0] not in _NOT_NAMES)


#: Packages whose classes among a model's bases name no model of the application.
_NOT_NAMES = frozenset({"builtins", "typing", "abc", "django", "sqlalchemy", "flask_sqlalchemy", "sqlmodel",
                        "pydantic"})


def _files_for(model: type) -> Iterator[str]:
    """The source files of the loaded user modules and of the model's own package (not
    Django's or SQLAlchemy's: their own models' writes are framework bookkeeping)."""
    package = (getattr(model, "__module__", "") or "").split(".")[0]
    if package in _FRAMEWORKS:
        package = ""
    for name, module in list(sys.modules.items()):
        try:
            filename = vars(module).get("__file__")
        except TypeError:
            continue
        if not filename or not filename.endswith(".py"):
            continue
        if (package and name.split(".")[0] == package) or not is_library_file(filename, vars(module)):
            yield filename


def _derived_in_file(filename: str) -> tuple[frozenset[str], frozenset[str]]:
    """(the attributes the file's code derives from themselves, the names it mentions)."""
    try:
        with tokenize.open(filename) as handle:
            tree = ast.parse(handle.read(), filename)
    except (OSError, SyntaxError, ValueError):  # (UnicodeDecodeError is a ValueError)
        return frozenset(), frozenset()
    names: set[str] = set()
    for scope in _scopes(tree):
        names |= _derived_in_scope(scope)
    if not names:
        return frozenset(), frozenset()
    return frozenset(names), frozenset(_mentioned(tree))


def _mentioned(tree: ast.AST) -> Iterator[str]:
    """Every name the file uses: identifiers, attributes, imported names, class definitions."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            yield node.id
        elif isinstance(node, ast.Attribute):
            yield node.attr
        elif isinstance(node, ast.ClassDef):
            yield node.name
        elif isinstance(node, ast.alias):
            yield node.name.rsplit(".", 1)[-1]
            if node.asname:
                yield node.asname
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
            yield node.value  # a string annotation or a lazy relationship("Model")


_FRAMEWORKS = frozenset({"django", "sqlalchemy"})
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _scopes(tree: ast.AST) -> Iterator[list[ast.AST]]:
    """Each function's body (nested functions apart), and the module's and classes' own statements."""
    yield [tree]
    for node in ast.walk(tree):
        if isinstance(node, _FUNCTIONS):
            yield [node]


def _walk(roots: Iterable[ast.AST]) -> Iterator[ast.AST]:
    """Nodes of one scope: not into nested function bodies (their own scope)."""
    stack = []
    for root in roots:
        stack.extend(ast.iter_child_nodes(root))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, _FUNCTIONS):
            continue
        stack.extend(ast.iter_child_nodes(node))


def _derived_in_scope(scope: list[ast.AST]) -> set[str]:
    stores: list[tuple[str, Any, ast.AST | None]] = []   # (attribute, receiver node, value; None: augmented)
    locals_: list[tuple[str, ast.AST]] = []             # (local name, the expression it was set from)
    for node in _walk(scope):
        if isinstance(node, ast.AugAssign):
            if isinstance(node.target, ast.Attribute):
                stores.append((node.target.attr, node.target.value, None))
            elif isinstance(node.target, ast.Name):
                locals_.append((node.target.id, node.value))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            value = node.value
            if value is None:
                continue
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                for leaf in _leaves(target):
                    if isinstance(leaf, ast.Attribute):
                        stores.append((leaf.attr, leaf.value, value))
                    elif isinstance(leaf, ast.Name):
                        locals_.append((leaf.id, value))
        elif isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
            locals_.append((node.target.id, node.value))
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            for leaf in _leaves(node.target):
                if isinstance(leaf, ast.Name):
                    locals_.append((leaf.id, node.iter))
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            for leaf in _leaves(node.optional_vars):
                if isinstance(leaf, ast.Name):
                    locals_.append((leaf.id, node.context_expr))
        elif isinstance(node, ast.Call) and _is_setattr(node):
            stores.append((node.args[1].value, node.args[0], node.args[2]))
    derived: set[str] = set()
    tainted: dict[str, dict[str, set[str]]] = {}
    for attr, receiver, value in stores:
        if attr in derived:
            continue
        if value is None:
            derived.add(attr)
            continue
        names = tainted.get(attr)
        if names is None:
            names = tainted[attr] = _tainted(locals_, attr)
        if _reads(value, attr, receiver, names):
            derived.add(attr)
    return derived


def _leaves(target: ast.AST) -> Iterator[ast.AST]:
    if isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _leaves(element)
    elif isinstance(target, ast.Starred):
        yield from _leaves(target.value)
    else:
        yield target


def _is_setattr(node: ast.Call) -> bool:
    return (isinstance(node.func, ast.Name) and node.func.id == "setattr" and len(node.args) == 3
            and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str))


def _tainted(locals_: list[tuple[str, ast.AST]], attr: str) -> dict[str, set[str]]:
    """Local names whose value may come from attribute ``attr``, each with the receivers
    (:func:`_receiver_key`) it was read from (flow-insensitive, to a fixpoint)."""
    tainted: dict[str, set[str]] = {}
    changed = True
    while changed:
        changed = False
        for name, value in locals_:
            found = _receivers_read(value, attr, tainted)
            if found - tainted.get(name, set()):
                tainted.setdefault(name, set()).update(found)
                changed = True
    return tainted


def _receiver_key(node: ast.AST) -> str:
    """A receiver as written, for comparing two (``self`` is ``self``, not ``form``)."""
    return ast.dump(node)


def _receivers_read(expr: ast.AST, attr: str, tainted: dict[str, set[str]]) -> set[str]:
    """The receivers whose attribute ``attr`` ``expr`` reads, directly, through ``getattr``
    or through a tainted local."""
    found: set[str] = set()
    for node in ast.walk(expr):
        if isinstance(node, ast.Attribute) and node.attr == attr:
            found.add(_receiver_key(node.value))
        elif isinstance(node, ast.Name) and node.id in tainted:
            found |= tainted[node.id]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value == attr):
            found.add(_receiver_key(node.args[0]))
    return found


def _reads(expr: ast.AST, attr: str, receiver: Any, tainted: dict[str, set[str]]) -> bool:
    """Whether ``expr`` may compute from attribute ``attr`` of ``receiver``: reads it (itself
    or through a tainted local), or hands the receiver itself to a call (``total(x)``,
    ``x.recount()``)."""
    if _receiver_key(receiver) in _receivers_read(expr, attr, tainted):
        return True
    receiver_name = receiver.id if isinstance(receiver, ast.Name) else None
    if receiver_name is None:
        return False
    for node in ast.walk(expr):
        if isinstance(node, ast.Call) and (
                any(isinstance(a, ast.Name) and a.id == receiver_name for a in node.args)
                or any(isinstance(k.value, ast.Name) and k.value.id == receiver_name for k in node.keywords)
                or (isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == receiver_name)):
            return True
    return False
