"""Which objects are SQLAlchemy sessions: resolved from where they come from.

The analysis has always taken a name that contains "session" (``session``,
``db_session``, ``lab.AutocommitSession()``) for a Session.  That misses sessions made
by a factory under another name: ``with stack.Auto() as own:``, ``db = SessionLocal()``,
``s = make_session()``.  Missing them is not harmless: a read through ``own.get(M, k)``
is no read, ``own.commit()`` no write, and a helper that loads and writes a row with
its own session hides a TXN103 from its caller.

This module resolves such names by following definitions, never by guessing from a
name:

* SQLAlchemy's factories: a call of ``sessionmaker`` / ``async_sessionmaker`` (a
  factory), ``scoped_session`` / ``async_scoped_session`` (a factory that is also
  used as a session), when the name comes from ``sqlalchemy`` (module-level or
  function-level import); txnsafety's ``instrument(factory)`` returns its argument;
* names bound to them at module level (``SessionLocal = sessionmaker(engine)``);
* attributes holding them: a class-level annotation (``Auto: sessionmaker``), a
  class-level assignment, ``self.X = ...`` in a method, and the arguments of a
  constructor call in the class's module (dataclass fields by keyword, and by position
  only when the order is known: no base class, no ``field(init=False)`` / ``KW_ONLY`` /
  ``kw_only``; ``__init__`` parameters copied to ``self.X``);
* functions and methods returning a factory, a session (``return SessionLocal()``) or
  an instance of such a class (by their return statements or return annotation);
* a parameter annotated with such a class (``stack: SyncStack``) or with a factory
  type, ``self`` in a method;
* across modules, through the same imports the analysis already follows for models
  and helpers (``txnsafety lint``; flake8 sees one file and resolves within it).

Deliberately *not* a session: a parameter or return value merely annotated
``Session`` / ``AsyncSession``.  Such a session belongs to a caller, who may have begun
a transaction (autobegin, ``with session.begin():``) the function cannot see; judging
its writes as "no transaction" would be a guess.  Names that say "session" are still
taken as sessions, as before.

Every name is read in its own scope: a function's or method's local (bound in any way:
assignment, for / with / except / match target, walrus, comprehension variable,
parameter, import; ``global`` names excepted) is resolved from its own plain
assignments, parameter annotation or function-level import, or is unknown; it never
falls back to the module-level name of the same spelling.  Strings are read as code only
where they are annotations.  Names, class members and locals are memoised with a cycle
guard, so resolution stays linear; a RecursionError leaves the name unknown.

Facts are read from a module's ``ast`` lazily, the first time a name of that module
needs resolving, so modules that never ask cost nothing.  Those facts live in
:mod:`.session_facts`, the expressions reduced to shapes in :mod:`.session_shapes`;
this module resolves names from them.
"""
from __future__ import annotations

import ast
from typing import Callable, Iterator, Optional

from .session_facts import Env, SessionFacts
from .session_shapes import Shape, cst_local_names, shape_of_ast, shape_of_cst

__all__ = ["SessionTypes", "cst_local_names", "is_session_type", "shape_of_ast", "shape_of_cst"]

#: SQLAlchemy callables by name: what calling them gives
_SQLA_CALLABLES = {"sessionmaker": "fn:factory", "async_sessionmaker": "fn:factory",
                   "scoped_session": "fn:scoped", "async_scoped_session": "fn:scoped",
                   "Session": "fn:session", "AsyncSession": "fn:session"}
#: txnsafety callables that return their (first) argument
_IDENTITY = {"instrument"}
_BUSY = "busy"
_MAX_DEPTH = 12


def _from_sqlalchemy(module: str) -> bool:
    return module.split(".")[0] in ("sqlalchemy", "flask_sqlalchemy")


def _from_txnsafety(module: str) -> bool:
    return module.split(".")[0] == "txnsafety"


#: (module key, alias, as_module) -> (other module key, name) through an import, or None
ImportResolver = Callable[[str, str, bool], Optional[tuple[str, str]]]


class SessionTypes:
    """Resolves what an expression is: ``"session"``, ``"factory"``, ``"scoped"`` (a
    ``scoped_session``: a factory used as a session), ``"inst:<module>:<class>"``,
    ``"class:..."``, ``"fn:<what a call gives>"``, ``"module:<key>"``, or None (unknown).

    One instance serves a run: the flake8 plugin's one file, or every file of
    ``txnsafety lint`` (``resolve`` then follows imports between them)."""

    def __init__(self, trees: dict[str, Optional[ast.AST]], resolve: Optional[ImportResolver] = None):
        self.trees = trees
        self.resolve = resolve
        self._facts: dict[str, SessionFacts] = {}
        self._names: dict[tuple[str, str], Optional[str]] = {}
        #: (module key, class, attribute) -> its type (``_BUSY`` while being resolved)
        self._members: dict[tuple[str, str, str], Optional[str]] = {}
        #: (id of a scope's env, name) -> a lazily resolved local's type (the envs live
        #: in the facts, as long as this instance)
        self._locals: dict[tuple[int, str], Optional[str]] = {}

    def facts(self, key: str) -> SessionFacts:
        facts = self._facts.get(key)
        if facts is None:
            facts = self._facts[key] = SessionFacts(self.trees.get(key), key)
        return facts

    # -- what an expression is
    def type_of(self, key: str, shape: Shape, env: dict[str, str], depth: int = 0) -> Optional[str]:
        """The type of ``shape`` evaluated in module ``key`` with local names ``env``."""
        if shape is None or depth > _MAX_DEPTH:
            return None
        kind = shape[0]
        if kind == "name":
            if shape[1] in env:              # a local name ("": a local of unknown type)
                got = env[shape[1]]
                if isinstance(got, tuple):
                    return self.local_type(key, shape[1], env, depth + 1)
                return got or None
            return self.name_type(key, shape[1], depth + 1)
        if kind == "attr":
            return self.attr_type(self.type_of(key, shape[1], env, depth + 1), shape[2], depth + 1)
        if kind == "call":
            return self.call_type(key, shape, env, depth + 1)
        if kind == "ann":
            return self.annotation_type(key, shape[1], depth + 1)
        return None

    def call_type(self, key: str, shape: tuple, env: dict[str, str], depth: int) -> Optional[str]:
        func = self.type_of(key, shape[1], env, depth)
        if func == "identity":
            return self.type_of(key, shape[2][0], env, depth) if shape[2] else None
        if func in ("factory", "scoped"):
            return "session"
        if func is not None and func.startswith("fn:"):
            return func[3:] or None
        if func is not None and func.startswith("class:"):
            return "inst:" + func[6:]
        return None

    def annotation_type(self, key: str, shape: Shape, depth: int) -> Optional[str]:
        """What a name annotated ``shape`` holds: a factory (``sessionmaker``, also
        ``sessionmaker[Session]`` / ``Optional[...]``) or an instance of a project class.
        ``Session`` / ``AsyncSession`` give None on purpose (see the module docstring)."""
        if shape is None or depth > _MAX_DEPTH:
            return None
        if shape[0] == "union":
            found = {self.annotation_type(key, part, depth + 1) for part in shape[1]} - {None}
            return found.pop() if len(found) == 1 else None
        if shape[0] == "sub":
            base = shape[1]
            if base is not None and base[0] in ("name", "attr") and \
                    (base[-1] if base[0] == "name" else base[2]) == "Optional":
                return self.annotation_type(key, shape[2], depth + 1)
            return self.annotation_type(key, base, depth + 1)
        t = self.type_of(key, shape, {}, depth + 1)
        if t in ("fn:factory", "fn:scoped"):
            return t[3:]
        if t is not None and t.startswith("class:"):
            return "inst:" + t[6:]
        return None

    def attr_type(self, base: Optional[str], attr: str, depth: int) -> Optional[str]:
        if base is None:
            return None
        if base.startswith("module:"):
            return self.name_type(base[7:], attr, depth)
        if base.startswith(("inst:", "class:")):
            key, _, cls = base.split(":", 1)[1].rpartition(":")
            return self.member_type(key, cls, attr, depth)
        return None

    def expression_type(self, key: str, shape: Shape, env: dict[str, str]) -> Optional[str]:
        """``type_of`` for the analysis: what cannot be resolved (too deep) is unknown."""
        try:
            return self.type_of(key, shape, env)
        except RecursionError:
            return None

    def param_type(self, key: str, annotation: Shape) -> Optional[str]:
        """``annotation_type`` for the analysis (a parameter's annotation), never raising."""
        try:
            return self.annotation_type(key, annotation, 0)
        except RecursionError:
            return None

    def local_type(self, key: str, name: str, env: Env, depth: int) -> Optional[str]:
        """A local of a function / method / class body resolved from its own bindings
        (see ``Env``), memoised per scope; a cycle or an overflow is unknown."""
        memo_key = (id(env), name)
        if memo_key in self._locals:
            got = self._locals[memo_key]
            return None if got == _BUSY else got
        self._locals[memo_key] = _BUSY
        got = None
        try:
            binding = env[name]
            if binding[0] == "local":         # every assignment must say the same
                found = {self.type_of(key, s, env, depth + 1) for s in binding[1]}
                got = found.pop() if len(found) == 1 else None
            elif binding[0] == "import":
                got = self.import_type(key, name, binding[1:], depth + 1)
            elif binding[0] == "ann":
                got = self.annotation_type(key, binding[1], depth + 1)
        except RecursionError:
            got = None
        self._locals[memo_key] = got
        return got

    def member_type(self, key: str, cls: str, attr: str, depth: int) -> Optional[str]:
        """An attribute or method of class ``cls`` of module ``key`` (or of its bases
        defined in that module); memoised, a cycle (``self.x = self.x``) is unknown."""
        memo_key = (key, cls, attr)
        if memo_key in self._members:
            got = self._members[memo_key]
            return None if got == _BUSY else got
        self._members[memo_key] = _BUSY
        try:
            got = self._member_type(key, cls, attr, depth)
        except RecursionError:
            got = None
        self._members[memo_key] = got
        return got

    def _member_type(self, key: str, cls: str, attr: str, depth: int) -> Optional[str]:
        seen: set[str] = set()
        while cls and cls not in seen and depth <= _MAX_DEPTH:
            seen.add(cls)
            facts = self.facts(key).cls(cls)
            if facts is None:
                return None
            if attr in facts.methods:
                what = _agree(self.type_of(key, s, env, depth + 1) for s, env in facts.methods[attr])
                return "fn:" + what if what else None
            found = _agree(self.type_of(key, s, env, depth + 1)
                           for s, env in facts.members.get(attr, ()))
            if found is None and not facts.mapped and facts.filled_by_constructor(attr):
                self.facts(key).constructed(cls)
                found = _agree(self.type_of(key, s, env, depth + 1)
                               for s, env in facts.members.get(attr, ()))
            if found is not None or attr in facts.members:
                return found
            cls = next((b for b in facts.bases if self.facts(key).has_class(b)), "")
        return None

    def name_type(self, key: str, name: str, depth: int = 0) -> Optional[str]:
        """What module-level ``name`` of module ``key`` is (memoised; a cycle is unknown)."""
        memo_key = (key, name)
        if memo_key in self._names:
            got = self._names[memo_key]
            return None if got == _BUSY else got
        self._names[memo_key] = _BUSY
        try:
            got = self._name_type(key, name, depth)
        except RecursionError:
            got = None
        self._names[memo_key] = got
        return got

    def _name_type(self, key: str, name: str, depth: int) -> Optional[str]:
        facts = self.facts(key)
        if name in facts.assigns:
            return self.type_of(key, facts.assigns[name], {}, depth + 1)
        if facts.has_function(name):
            what = _agree(self.type_of(key, s, env, depth + 1) for s, env in facts.function(name))
            return "fn:" + what if what else None
        if facts.has_class(name):
            return f"class:{key}:{name}"
        imported = facts.imports.get(name)
        if imported is None and (name in _SQLA_CALLABLES or name in _IDENTITY):
            facts.deep()                     # ``from sqlalchemy... import`` inside a function
            imported = facts.imports.get(name)
        if imported is None:
            return None
        return self.import_type(key, name, imported, depth)

    def import_type(self, key: str, name: str, imported: tuple, depth: int) -> Optional[str]:
        """What ``from module import original as name`` (``imported``) in module ``key`` is."""
        module, original, _level = imported
        if _from_sqlalchemy(module):
            return _SQLA_CALLABLES.get(original)
        if _from_txnsafety(module):
            return "identity" if original in _IDENTITY else None
        if self.resolve is None:
            return None
        facts = self.facts(key)
        if facts.imports.get(name) != tuple(imported):
            facts.deep()                     # a function-level import: the module's table
            if facts.imports.get(name) != tuple(imported):
                return None                  # resolves ``name`` to another import
        target = self.resolve(key, name, False)
        if target is not None:
            got = self.name_type(target[0], target[1], depth + 1)
            if got is not None:
                return got
        target = self.resolve(key, name, True)
        return f"module:{target[0]}" if target is not None else None


def _agree(types: Iterator[Optional[str]]) -> Optional[str]:
    """The one type the known sources agree on (unknown sources are left out), else None."""
    found = {t for t in types if t is not None}
    return found.pop() if len(found) == 1 else None


def is_session_type(t: Optional[str]) -> bool:
    """Is a value of type ``t`` used as a Session (a ``scoped_session`` proxies one)?"""
    return t in ("session", "scoped")
