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
  constructor call in the class's module (dataclass fields by position or keyword,
  ``__init__`` parameters copied to ``self.X``);
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

Facts are read from a module's ``ast`` lazily, the first time a name of that module
needs resolving, so modules that never ask cost nothing.
"""
from __future__ import annotations

import ast
from typing import Callable, Iterator, Optional, Union

import libcst as cst

#: an expression reduced to what resolution needs (see ``shape_of_ast``):
#: ("name", id) | ("attr", base, name) | ("call", func, args, kwargs) | ("sub", base)
#: | ("union", parts) | ("ann", shape) (an annotation) | None (anything else)
Shape = Optional[tuple]

#: SQLAlchemy callables by name: what calling them gives
_SQLA_CALLABLES = {"sessionmaker": "fn:factory", "async_sessionmaker": "fn:factory",
                   "scoped_session": "fn:scoped", "async_scoped_session": "fn:scoped",
                   "Session": "fn:session", "AsyncSession": "fn:session"}
#: txnsafety callables that return their (first) argument
_IDENTITY = {"instrument"}
#: decorators and bases that make constructor arguments the class's fields, in order
_FIELD_CLASSES = {"dataclass", "define", "frozen", "mutable", "NamedTuple"}
_BUSY = "busy"
_MAX_DEPTH = 12


def _from_sqlalchemy(module: str) -> bool:
    return module.split(".")[0] in ("sqlalchemy", "flask_sqlalchemy")


def _from_txnsafety(module: str) -> bool:
    return module.split(".")[0] == "txnsafety"


# ---------------------------------------------------------------- shapes

def shape_of_ast(node: Optional[ast.AST]) -> Shape:
    """``node`` (an ``ast`` expression) as a Shape; awaits are looked through."""
    if node is None:
        return None
    if isinstance(node, ast.Await):
        return shape_of_ast(node.value)
    if isinstance(node, ast.Name):
        return ("name", node.id)
    if isinstance(node, ast.Attribute):
        return ("attr", shape_of_ast(node.value), node.attr)
    if isinstance(node, ast.Call):
        return ("call", shape_of_ast(node.func), tuple(shape_of_ast(a) for a in node.args),
                tuple((k.arg, shape_of_ast(k.value)) for k in node.keywords if k.arg))
    if isinstance(node, ast.Subscript):
        return ("sub", shape_of_ast(node.value), shape_of_ast(node.slice))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return ("union", (shape_of_ast(node.left), shape_of_ast(node.right)))
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            return shape_of_ast(ast.parse(node.value, mode="eval").body)
        except SyntaxError:
            return None
    return None


def shape_of_cst(node: Optional[cst.CSTNode]) -> Shape:
    """``node`` (a libcst expression) as a Shape, like ``shape_of_ast``."""
    if node is None:
        return None
    if isinstance(node, cst.Await):
        return shape_of_cst(node.expression)
    if isinstance(node, cst.Name):
        return ("name", node.value)
    if isinstance(node, cst.Attribute):
        return ("attr", shape_of_cst(node.value), node.attr.value)
    if isinstance(node, cst.Call):
        args = tuple(shape_of_cst(a.value) for a in node.args if a.keyword is None and not a.star)
        kwargs = tuple((a.keyword.value, shape_of_cst(a.value)) for a in node.args
                       if a.keyword is not None)
        return ("call", shape_of_cst(node.func), args, kwargs)
    if isinstance(node, cst.Subscript):
        first = node.slice[0].slice if node.slice else None
        return ("sub", shape_of_cst(node.value),
                shape_of_cst(first.value) if isinstance(first, cst.Index) else None)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.BitOr):
        return ("union", (shape_of_cst(node.left), shape_of_cst(node.right)))
    if isinstance(node, cst.SimpleString):
        try:
            return shape_of_ast(ast.parse(node.evaluated_value, mode="eval").body)
        except (SyntaxError, ValueError, TypeError):
            return None
    return None


# ---------------------------------------------------------------- facts of one module

class ClassFacts:
    """What a class's body, methods and constructor calls say about its attributes."""

    def __init__(self, node: ast.ClassDef):
        self.name = node.name
        self.bases = [_last_name(b) for b in node.bases]
        marks = {_last_name(d.func if isinstance(d, ast.Call) else d) for d in node.decorator_list}
        self.fields_by_position = bool((marks | set(self.bases)) & _FIELD_CLASSES)
        #: annotated class-level names in order (a dataclass's fields)
        self.fields: list[str] = []
        #: attribute -> the shapes assigned to it (annotations as ("ann", shape))
        self.members: dict[str, list[Shape]] = {}
        #: method -> its return shapes (its return annotation as ("ann", shape))
        self.methods: dict[str, list[Shape]] = {}
        #: ``__init__``'s parameters after self, and which become ``self.X``
        self.init_params: list[str] = []
        self.param_attrs: dict[str, list[str]] = {}
        #: the methods' first parameters (``self``): the instance, in their shapes
        self.self_names: set[str] = set()
        self.mapped = False

    def filled_by_constructor(self, attr: str) -> bool:
        if self.fields_by_position:
            return attr in self.fields
        return any(attr in attrs for attrs in self.param_attrs.values())

    def add(self, attr: str, shape: Shape) -> None:
        if shape is not None:
            self.members.setdefault(attr, []).append(shape)


def _last_name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):
        return _last_name(node.value)
    return ""


def _returns(body: list) -> Iterator[ast.expr]:
    """The values of a function's own return statements (not those of nested defs)."""
    for node in _statements(body):
        if isinstance(node, ast.Return) and node.value is not None:
            yield node.value


def _statements(body: list) -> Iterator[ast.stmt]:
    """Statements of ``body``, into compound statements but not into nested defs/classes."""
    stack = list(reversed(body))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for field in ("body", "orelse", "finalbody"):
            stack.extend(reversed(getattr(node, field, None) or []))
        for h in getattr(node, "handlers", None) or []:
            stack.extend(reversed(h.body))
        for case in getattr(node, "cases", None) or []:
            stack.extend(reversed(case.body))


class SessionFacts:
    """The definitions of one module that resolution looks at.

    Built in steps, each only when a question needs it (flake8 runs the plugin on every
    file): the module-level statements first; a function's returns or a class's body
    when that name is asked about; the constructor calls and function-level imports of
    the whole module when a class attribute or a SQLAlchemy name needs them."""

    def __init__(self, tree: Optional[ast.AST]):
        #: alias -> (module, name, level); function-level imports join after ``deep()``
        self.imports: dict[str, tuple[str, str, int]] = {}
        self.assigns: dict[str, Shape] = {}
        self._function_nodes: dict[str, ast.AST] = {}
        self._class_nodes: dict[str, ast.ClassDef] = {}
        self._functions: dict[str, list[Shape]] = {}
        self._classes: dict[str, ClassFacts] = {}
        self._deep_done = False
        self._constructions: list[ast.Call] = []
        self._body = getattr(tree, "body", None) or []
        for node in _statements(self._body):
            if isinstance(node, ast.ImportFrom) and (node.module or node.level):
                for a in node.names:
                    self.imports.setdefault(a.asname or a.name, (node.module or "", a.name, node.level))
            elif isinstance(node, ast.ClassDef):
                self._class_nodes[node.name] = node
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._function_nodes[node.name] = node
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Name):
                        self.assigns[t.id] = shape_of_ast(node.value)

    def has_function(self, name: str) -> bool:
        return name in self._function_nodes

    def has_class(self, name: str) -> bool:
        return name in self._class_nodes

    def function(self, name: str) -> list[Shape]:
        """The return shapes of module-level function ``name`` (read on first use)."""
        if name not in self._functions:
            self._functions[name] = _function_returns(self._function_nodes[name])
        return self._functions[name]

    def cls(self, name: str) -> Optional[ClassFacts]:
        """Class ``name``'s own facts (its body and methods; read on first use)."""
        if name not in self._class_nodes:
            return None
        if name not in self._classes:
            self._classes[name] = _read_class(self._class_nodes[name], self._constructions)
        return self._classes[name]

    def constructed(self, name: str) -> None:
        """Map the module's constructor calls of class ``name`` into its attributes (a
        dataclass field, an ``__init__`` parameter copied to ``self.X``), once."""
        facts = self.cls(name)
        if facts is None or facts.mapped:
            return
        facts.mapped = True
        self.deep()
        _map_constructions(facts, [c for c in self._constructions if c.func.id == name])

    def deep(self) -> None:
        """Collect the constructor calls and function-level imports of the module (once)."""
        if self._deep_done:
            return
        self._deep_done = True
        for name in self._class_nodes:
            self.cls(name)
        for node in _statements(self._body):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._inner(node.body, self._constructions)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.Expr, ast.Return)):
                _note_construction(node.value, self._constructions)

    def _inner(self, body: list, constructions: list) -> None:
        """A function body: its imports and the constructor calls it makes."""
        for node in _statements(body):
            if isinstance(node, ast.ImportFrom) and node.module:
                for a in node.names:
                    self.imports.setdefault(a.asname or a.name, (node.module, a.name, node.level))
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.Expr, ast.Return)):
                _note_construction(node.value, constructions)


def _function_returns(node: Union[ast.FunctionDef, ast.AsyncFunctionDef]) -> list[Shape]:
    out: list[Shape] = [shape_of_ast(v) for v in _returns(node.body)]
    if node.returns is not None:
        out.append(("ann", shape_of_ast(node.returns)))
    return out


def _read_class(node: ast.ClassDef, constructions: list) -> ClassFacts:
    facts = ClassFacts(node)
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            name = stmt.target.id
            if _last_name(stmt.annotation) != "ClassVar":
                facts.fields.append(name)
            facts.add(name, ("ann", shape_of_ast(stmt.annotation)))
            facts.add(name, shape_of_ast(stmt.value))
        elif isinstance(stmt, ast.Assign):
            for t in stmt.targets:
                if isinstance(t, ast.Name):
                    facts.add(t.id, shape_of_ast(stmt.value))
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            facts.methods[stmt.name] = _read_method(facts, stmt, constructions)
    return facts


def _read_method(facts: ClassFacts, node: Union[ast.FunctionDef, ast.AsyncFunctionDef],
                 constructions: list) -> list[Shape]:
    """``self.X = ...`` in a method; ``__init__``'s parameters that become attributes; the
    method's return shapes (one walk of its body)."""
    returns: list[Shape] = [("ann", shape_of_ast(node.returns))] if node.returns is not None else []
    params = [a.arg for a in node.args.posonlyargs + node.args.args]
    if params:
        facts.self_names.add(params[0])
    if node.name == "__init__":
        facts.init_params = params[1:] + [a.arg for a in node.args.kwonlyargs]
    for stmt in _statements(node.body):
        if isinstance(stmt, ast.Return) and stmt.value is not None:
            returns.append(shape_of_ast(stmt.value))
        if not isinstance(stmt, (ast.Assign, ast.AnnAssign)) or stmt.value is None:
            continue
        _note_construction(stmt.value, constructions)
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        for t in targets:
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and \
                    params and t.value.id == params[0]:
                value = stmt.value
                if node.name == "__init__" and isinstance(value, ast.Name) and \
                        value.id in facts.init_params:
                    facts.param_attrs.setdefault(value.id, []).append(t.attr)
                else:
                    facts.add(t.attr, shape_of_ast(value))
    return returns


def _note_construction(value: Optional[ast.AST], constructions: list) -> None:
    if isinstance(value, ast.Await):
        value = value.value
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
        constructions.append(value)


def _map_constructions(facts: ClassFacts, constructions: list) -> None:
    """The arguments of ``constructions`` (calls of the class) become its attributes' values."""
    for call in constructions:
        if facts.fields_by_position:
            names = facts.fields
            by_name = {n: [n] for n in names}
        else:
            names = facts.init_params
            by_name = facts.param_attrs
        for i, arg in enumerate(call.args):
            if isinstance(arg, ast.Starred) or i >= len(names):
                break
            for attr in by_name.get(names[i], ()):
                facts.add(attr, shape_of_ast(arg))
        for kw in call.keywords:
            if kw.arg is not None:
                for attr in by_name.get(kw.arg, ()):
                    facts.add(attr, shape_of_ast(kw.value))


# ---------------------------------------------------------------- resolution

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

    def facts(self, key: str) -> SessionFacts:
        facts = self._facts.get(key)
        if facts is None:
            facts = self._facts[key] = SessionFacts(self.trees.get(key))
        return facts

    # -- what an expression is
    def type_of(self, key: str, shape: Shape, env: dict[str, str], depth: int = 0) -> Optional[str]:
        """The type of ``shape`` evaluated in module ``key`` with local names ``env``."""
        if shape is None or depth > _MAX_DEPTH:
            return None
        kind = shape[0]
        if kind == "name":
            if shape[1] in env:              # a local name ("": a local of unknown type)
                return env[shape[1]] or None
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

    def member_type(self, key: str, cls: str, attr: str, depth: int) -> Optional[str]:
        """An attribute or method of class ``cls`` of module ``key`` (or of its bases
        defined in that module)."""
        seen: set[str] = set()
        while cls and cls not in seen and depth <= _MAX_DEPTH:
            seen.add(cls)
            facts = self.facts(key).cls(cls)
            if facts is None:
                return None
            me = dict.fromkeys(facts.self_names, f"inst:{key}:{cls}")
            if attr in facts.methods:
                what = _agree(self.type_of(key, s, me, depth + 1) for s in facts.methods[attr])
                return "fn:" + what if what else None
            found = _agree(self.type_of(key, s, me, depth + 1) for s in facts.members.get(attr, ()))
            if found is None and not facts.mapped and facts.filled_by_constructor(attr):
                self.facts(key).constructed(cls)
                found = _agree(self.type_of(key, s, me, depth + 1) for s in facts.members.get(attr, ()))
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
        got = self._name_type(key, name, depth)
        self._names[memo_key] = got
        return got

    def _name_type(self, key: str, name: str, depth: int) -> Optional[str]:
        facts = self.facts(key)
        if name in facts.assigns:
            return self.type_of(key, facts.assigns[name], {}, depth + 1)
        if facts.has_function(name):
            what = _agree(self.type_of(key, s, {}, depth + 1) for s in facts.function(name))
            return "fn:" + what if what else None
        if facts.has_class(name):
            return f"class:{key}:{name}"
        imported = facts.imports.get(name)
        if imported is None and (name in _SQLA_CALLABLES or name in _IDENTITY):
            facts.deep()                     # ``from sqlalchemy... import`` inside a function
            imported = facts.imports.get(name)
        if imported is None:
            return None
        module, original, _level = imported
        if _from_sqlalchemy(module):
            return _SQLA_CALLABLES.get(original)
        if _from_txnsafety(module):
            return "identity" if original in _IDENTITY else None
        if self.resolve is None:
            return None
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
