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
needs resolving, so modules that never ask cost nothing.
"""
from __future__ import annotations

import ast
import dataclasses
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

def shape_of_ast(node: Optional[ast.AST], annotation: bool = False) -> Shape:
    """``node`` (an ``ast`` expression) as a Shape; awaits are looked through.

    A string is read as code only in an ``annotation`` (``x: "Stack"``), never elsewhere
    (a module's string constants are data).  Whatever cannot be shaped (a too deeply nested
    expression) is None, unknown."""
    try:
        return _shape_ast(node, annotation)
    except (RecursionError, MemoryError):
        return None


def _shape_ast(node: Optional[ast.AST], annotation: bool) -> Shape:
    if node is None:
        return None
    if isinstance(node, ast.Await):
        return _shape_ast(node.value, annotation)
    if isinstance(node, ast.Name):
        return ("name", node.id)
    if isinstance(node, ast.Attribute):
        return ("attr", _shape_ast(node.value, annotation), node.attr)
    if isinstance(node, ast.Call):
        return ("call", _shape_ast(node.func, annotation),
                tuple(_shape_ast(a, annotation) for a in node.args),
                tuple((k.arg, _shape_ast(k.value, annotation)) for k in node.keywords if k.arg))
    if isinstance(node, ast.Subscript):
        return ("sub", _shape_ast(node.value, annotation), _shape_ast(node.slice, annotation))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return ("union", (_shape_ast(node.left, annotation), _shape_ast(node.right, annotation)))
    if annotation and isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _shape_of_string(node.value)
    return None


#: a string annotation longer than this is not read (real ones are short)
_MAX_ANNOTATION = 200


def _shape_of_string(text: str) -> Shape:
    """A string annotation (``"Stack"``, ``"Optional[sessionmaker]"``) as a Shape."""
    if len(text) > _MAX_ANNOTATION:
        return None
    try:
        return _shape_ast(ast.parse(text.strip(), mode="eval").body, True)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def shape_of_cst(node: Optional[cst.CSTNode], annotation: bool = False) -> Shape:
    """``node`` (a libcst expression) as a Shape, like ``shape_of_ast``."""
    try:
        return _shape_cst(node, annotation)
    except (RecursionError, MemoryError):
        return None


def _shape_cst(node: Optional[cst.CSTNode], annotation: bool) -> Shape:
    if node is None:
        return None
    if isinstance(node, cst.Await):
        return _shape_cst(node.expression, annotation)
    if isinstance(node, cst.Name):
        return ("name", node.value)
    if isinstance(node, cst.Attribute):
        return ("attr", _shape_cst(node.value, annotation), node.attr.value)
    if isinstance(node, cst.Call):
        args = tuple(_shape_cst(a.value, annotation) for a in node.args
                     if a.keyword is None and not a.star)
        kwargs = tuple((a.keyword.value, _shape_cst(a.value, annotation)) for a in node.args
                       if a.keyword is not None)
        return ("call", _shape_cst(node.func, annotation), args, kwargs)
    if isinstance(node, cst.Subscript):
        first = node.slice[0].slice if node.slice else None
        return ("sub", _shape_cst(node.value, annotation),
                _shape_cst(first.value, annotation) if isinstance(first, cst.Index) else None)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.BitOr):
        return ("union", (_shape_cst(node.left, annotation), _shape_cst(node.right, annotation)))
    if annotation and isinstance(node, cst.SimpleString):
        try:
            text = node.evaluated_value
        except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError):
            return None
        return _shape_of_string(text) if isinstance(text, str) else None
    return None


#: Fields of a libcst node that never hold a binding: whitespace, brackets, separators.
_NO_BINDINGS = ("whitespace", "leading_lines", "lines_after", "trailing_whitespace", "lpar", "rpar", "comma",
                "semicolon", "equal", "colon", "header", "footer", "dot", "newline")
_child_fields: dict[type, tuple[str, ...]] = {}


def _child_nodes(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The child nodes of ``node`` that may hold a binding.

    Not ``node.children``: libcst computes it with a visitor over every field, whitespace
    included, which made finding a function's local names most of a lint run."""
    names = _child_fields.get(type(node))
    if names is None:
        names = _child_fields[type(node)] = tuple(
            f.name for f in dataclasses.fields(node) if not f.name.startswith(_NO_BINDINGS))
    for name in names:
        value = getattr(node, name)
        if isinstance(value, cst.CSTNode):
            yield value
        elif isinstance(value, (list, tuple)):
            for item in value:
                if isinstance(item, cst.CSTNode):
                    yield item


def cst_local_names(node: cst.FunctionDef) -> set[str]:
    """The names function ``node`` binds in its own scope (libcst): assignments of every
    kind, for / with / except / match targets, the walrus, comprehension variables,
    ``del``, imports, nested defs and classes; names declared global / nonlocal are left
    out.  The analysis takes them as locals of unknown type until it sees their value, so
    none falls back to the module-level name of the same spelling."""
    bound: set[str] = set()
    declared: set[str] = set()

    def targets(t: Optional[cst.CSTNode]) -> None:
        if isinstance(t, cst.Name):
            bound.add(t.value)
        elif isinstance(t, (cst.Tuple, cst.List)):
            for e in t.elements:
                targets(e.value)
        elif isinstance(t, cst.StarredElement):
            targets(t.value)
        elif isinstance(t, cst.AsName):
            targets(t.name)

    stack: list = list(node.body.children) if isinstance(node.body, cst.CSTNode) else []
    while stack:
        n = stack.pop()
        if isinstance(n, (cst.FunctionDef, cst.ClassDef)):
            bound.add(n.name.value)
            stack.extend(d.decorator for d in n.decorators)
            continue
        if isinstance(n, cst.Lambda):
            continue
        if isinstance(n, (cst.Global, cst.Nonlocal)):
            declared.update(item.name.value for item in n.names)
            continue
        if isinstance(n, cst.AssignTarget):
            targets(n.target)
        elif isinstance(n, (cst.AnnAssign, cst.AugAssign, cst.For, cst.NamedExpr, cst.CompFor,
                            cst.Del)):
            targets(n.target)
        elif isinstance(n, cst.WithItem):
            targets(n.asname)
        elif isinstance(n, cst.ExceptHandler):
            targets(n.name)
        elif isinstance(n, (cst.Import, cst.ImportFrom)) and not isinstance(n.names, cst.ImportStar):
            for a in n.names:
                if a.asname is not None:
                    targets(a.asname)
                else:
                    name = a.name
                    while isinstance(name, cst.Attribute):
                        name = name.value
                    targets(name)
        elif isinstance(n, (cst.MatchAs, cst.MatchStar)):
            targets(n.name)
        elif isinstance(n, cst.MatchMapping):
            targets(n.rest)
        stack.extend(_child_nodes(n))
    return bound - declared


# ---------------------------------------------------------------- facts of one module

#: what a name is in a function, a method or a class body (see ``_scope_env``): a type
#: ("" unknown), or a binding resolved lazily on first use: ("local", shapes) assigned
#: only by plain ``name = ...`` statements; ("import", module, name, level) a
#: function-level ``from ... import``; ("ann", shape) a parameter's annotation
Env = dict


class ClassFacts:
    """What a class's body, methods and constructor calls say about its attributes.

    Every shape is kept with the names of the scope it was written in (``Env``): a
    method's ``self.db = db`` reads the method's local ``db``, never the module's."""

    def __init__(self, node: ast.ClassDef, key: str):
        self.name = node.name
        self.bases = [_last_name(b) for b in node.bases]
        self.instance = f"inst:{key}:{node.name}"
        decorators = [d.func if isinstance(d, ast.Call) else d for d in node.decorator_list]
        marks = {_last_name(d) for d in decorators}
        self.field_class = bool((marks | set(self.bases)) & _FIELD_CLASSES)
        #: annotated class-level names in order (a dataclass's fields)
        self.fields: list[str] = []
        #: fields that are no constructor parameter (``field(init=False)``)
        self.no_init: set[str] = set()
        #: may the constructor's positional arguments be mapped onto ``fields``?  Not when a
        #: base may bring fields of its own (they come first), nor past ``KW_ONLY`` /
        #: ``field(init=False)`` / ``kw_only=True``: then keyword arguments only
        self.positional = self.field_class and not any(
            b not in ("object", "NamedTuple", "Generic", "") for b in self.bases) and not any(
            isinstance(d, ast.Call) and any(k.arg == "kw_only" and not _is_false(k.value)
                                            for k in d.keywords)
            for d in node.decorator_list)
        #: attribute -> the (shape, env) assigned to it (annotations as ("ann", shape))
        self.members: dict[str, list[tuple[Shape, Env]]] = {}
        #: method -> its (return shape, env) (its return annotation as ("ann", shape))
        self.methods: dict[str, list[tuple[Shape, Env]]] = {}
        #: ``__init__``'s parameters after self, and which become ``self.X``
        self.init_params: list[str] = []
        self.positional_params: list[str] = []
        self.param_attrs: dict[str, list[str]] = {}
        self.mapped = False

    def filled_by_constructor(self, attr: str) -> bool:
        if self.field_class:
            return attr in self.fields and attr not in self.no_init
        return any(attr in attrs for attrs in self.param_attrs.values())

    def add(self, attr: str, shape: Shape, env: Env) -> None:
        if shape is not None:
            self.members.setdefault(attr, []).append((shape, env))


def _last_name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):
        return _last_name(node.value)
    return ""


def _is_false(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is False


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


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def _bindings(body: list) -> tuple[dict[str, int], dict[str, list], set[str]]:
    """The names ``body`` binds in its own scope: (name -> how many bindings of any kind,
    name -> its function-level ``from`` imports, names declared global / nonlocal).

    Any binding counts: assignments of every kind, for / with / except / match targets,
    the walrus, comprehension variables, ``del``, imports, nested defs and classes.  Nested
    scopes are not entered, but what they evaluate here is (decorators, defaults, bases)."""
    counts: dict[str, int] = {}
    imports: dict[str, list] = {}
    declared: set[str] = set()

    def bind(name: Optional[str]) -> None:
        if name:
            counts[name] = counts.get(name, 0) + 1

    stack: list = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, _SCOPES):
            if not isinstance(node, ast.Lambda):
                bind(node.name)
                stack.extend(node.decorator_list)
            if isinstance(node, ast.ClassDef):
                stack.extend(node.bases)
                stack.extend(k.value for k in node.keywords)
            else:
                stack.extend(node.args.defaults)
                stack.extend(d for d in node.args.kw_defaults if d is not None)
            continue
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            declared.update(node.names)
            continue
        if isinstance(node, ast.Name):
            if not isinstance(node.ctx, ast.Load):
                bind(node.id)
            continue
        if isinstance(node, ast.Import):
            for a in node.names:
                bind(a.asname or a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                if a.name != "*":
                    bind(a.asname or a.name)
                    imports.setdefault(a.asname or a.name, []).append(
                        (node.module or "", a.name, node.level))
        elif isinstance(node, ast.ExceptHandler):
            bind(node.name)
        elif type(node).__name__ in ("MatchAs", "MatchStar"):
            bind(node.name)
        elif type(node).__name__ == "MatchMapping":
            bind(node.rest)
        stack.extend(ast.iter_child_nodes(node))
    return counts, imports, declared


def _plain_assignments(body: list) -> dict[str, list[Shape]]:
    """name -> the values of the plain ``name = value`` statements of ``body``'s scope."""
    out: dict[str, list[Shape]] = {}
    for node in _statements(body):
        if isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            value = node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None and \
                isinstance(node.target, ast.Name):
            names, value = [node.target.id], node.value
        else:
            continue
        if names:
            shape = shape_of_ast(value)
            for n in names:
                out.setdefault(n, []).append(shape)
    return out


def _scope_env(node: Union[ast.FunctionDef, ast.AsyncFunctionDef], first: str = "") -> Env:
    """The local names of function ``node``: how each is resolved (see ``Env``), so that a
    local never falls back to the module-level name of the same spelling.  ``first``: the
    type of the first parameter (a method's ``self`` / ``cls``), "" when unknown."""
    counts, imports, declared = _bindings(node.body)
    args = node.args
    params = args.posonlyargs + args.args + args.kwonlyargs + \
        [a for a in (args.vararg, args.kwarg) if a is not None]
    for a in params:
        counts[a.arg] = counts.get(a.arg, 0) + 1
    plain = _plain_assignments(node.body) if counts else {}
    env: Env = {}
    for name, n in counts.items():
        if name in declared:
            continue
        if name in plain and len(plain[name]) == n:
            env[name] = ("local", tuple(plain[name]))
        elif name in imports and len(imports[name]) == n and len(set(imports[name])) == 1:
            env[name] = ("import",) + imports[name][0]
        else:
            env[name] = ""
    ordered = args.posonlyargs + args.args
    for a in params:
        if counts[a.arg] != 1 or a.arg in declared:
            continue                                     # rebound in the body: unknown
        if ordered and a is ordered[0] and first:
            env[a.arg] = first
        elif a.annotation is not None and a in ordered + args.kwonlyargs:
            env[a.arg] = ("ann", shape_of_ast(a.annotation, annotation=True))
    return env


def _rebound(node: Union[ast.FunctionDef, ast.AsyncFunctionDef]) -> set[str]:
    """The names bound in ``node``'s body (its parameters rebound among them)."""
    counts, _imports, declared = _bindings(node.body)
    return set(counts) | declared


class SessionFacts:
    """The definitions of one module that resolution looks at.

    Built in steps, each only when a question needs it (flake8 runs the plugin on every
    file): the module-level statements first; a function's returns or a class's body
    when that name is asked about; the constructor calls and function-level imports of
    the whole module when a class attribute or a SQLAlchemy name needs them."""

    def __init__(self, tree: Optional[ast.AST], key: str = ""):
        self.key = key
        #: alias -> (module, name, level); function-level imports join after ``deep()``
        self.imports: dict[str, tuple[str, str, int]] = {}
        self.assigns: dict[str, Shape] = {}
        self._function_nodes: dict[str, ast.AST] = {}
        self._class_nodes: dict[str, ast.ClassDef] = {}
        self._functions: dict[str, list[tuple[Shape, Env]]] = {}
        self._classes: dict[str, ClassFacts] = {}
        self._deep_done = False
        #: (constructor call, the env of the scope it is made in)
        self._constructions: list[tuple[ast.Call, Env]] = []
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

    def function(self, name: str) -> list[tuple[Shape, Env]]:
        """The (return shape, env) of module-level function ``name`` (read on first use)."""
        if name not in self._functions:
            self._functions[name] = _function_returns(self._function_nodes[name])
        return self._functions[name]

    def cls(self, name: str) -> Optional[ClassFacts]:
        """Class ``name``'s own facts (its body and methods; read on first use)."""
        if name not in self._class_nodes:
            return None
        if name not in self._classes:
            self._classes[name] = _read_class(self._class_nodes[name], self.key, self._constructions)
        return self._classes[name]

    def constructed(self, name: str) -> None:
        """Map the module's constructor calls of class ``name`` into its attributes (a
        dataclass field, an ``__init__`` parameter copied to ``self.X``), once."""
        facts = self.cls(name)
        if facts is None or facts.mapped:
            return
        facts.mapped = True
        self.deep()
        _map_constructions(facts, [(c, env) for c, env in self._constructions if c.func.id == name])

    def deep(self) -> None:
        """Collect the constructor calls and function-level imports of the module (once)."""
        if self._deep_done:
            return
        self._deep_done = True
        for name in self._class_nodes:
            self.cls(name)
        module_env: Env = {}
        for node in _statements(self._body):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._inner(node.body, _scope_env(node), self._constructions)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.Expr, ast.Return)):
                _note_construction(node.value, module_env, self._constructions)

    def _inner(self, body: list, env: Env, constructions: list) -> None:
        """A function body: its imports and the constructor calls it makes."""
        for node in _statements(body):
            if isinstance(node, ast.ImportFrom) and node.module:
                for a in node.names:
                    self.imports.setdefault(a.asname or a.name, (node.module, a.name, node.level))
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.Expr, ast.Return)):
                _note_construction(node.value, env, constructions)


def _function_returns(node: Union[ast.FunctionDef, ast.AsyncFunctionDef]) -> list[tuple[Shape, Env]]:
    env = _scope_env(node)
    out = [(shape_of_ast(v), env) for v in _returns(node.body)]
    if node.returns is not None:
        out.append((("ann", shape_of_ast(node.returns, annotation=True)), env))
    return out


def _read_class(node: ast.ClassDef, key: str, constructions: list) -> ClassFacts:
    facts = ClassFacts(node, key)
    counts, _imports, _declared = _bindings(node.body)
    body_env: Env = dict.fromkeys(counts, "")      # names of the class body itself: unknown
    kw_only = False
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            name = stmt.target.id
            kind = _last_name(stmt.annotation)
            if kind == "KW_ONLY":
                kw_only = True
                continue
            if kind != "ClassVar":
                facts.fields.append(name)
                if _field_option(stmt.value, "init") is False:
                    facts.no_init.add(name)
                if kw_only or _field_option(stmt.value, "kw_only") is True or \
                        name in facts.no_init:
                    facts.positional = False
            facts.add(name, ("ann", shape_of_ast(stmt.annotation, annotation=True)), body_env)
            facts.add(name, shape_of_ast(stmt.value), body_env)
        elif isinstance(stmt, ast.Assign):
            for t in stmt.targets:
                if isinstance(t, ast.Name):
                    facts.add(t.id, shape_of_ast(stmt.value), body_env)
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            facts.methods[stmt.name] = _read_method(facts, stmt, constructions)
    return facts


def _field_option(value: Optional[ast.AST], option: str) -> Optional[bool]:
    """``field(init=False)`` (dataclasses, attrs): the constant given for ``option``."""
    if isinstance(value, ast.Call) and _last_name(value.func) in ("field", "ib", "attrib"):
        for k in value.keywords:
            if k.arg == option and isinstance(k.value, ast.Constant):
                return bool(k.value.value)
    return None


def _read_method(facts: ClassFacts, node: Union[ast.FunctionDef, ast.AsyncFunctionDef],
                 constructions: list) -> list[tuple[Shape, Env]]:
    """``self.X = ...`` in a method; ``__init__``'s parameters that become attributes; the
    method's return shapes (one walk of its body)."""
    marks = {_last_name(d) for d in node.decorator_list}
    params = [a.arg for a in node.args.posonlyargs + node.args.args]
    if "staticmethod" in marks:
        first, me = "", None
    elif "classmethod" in marks:
        first, me = "class:" + facts.instance[5:], None
    else:
        first, me = facts.instance, (params[0] if params else None)
    env = _scope_env(node, first)
    if me is not None and env.get(me) != facts.instance:
        me = None                                      # ``self`` rebound in the method
    rebound = _rebound(node) if node.name == "__init__" else set()
    returns = [(("ann", shape_of_ast(node.returns, annotation=True)), env)] \
        if node.returns is not None else []
    if node.name == "__init__" and me is not None:
        facts.init_params = params[1:] + [a.arg for a in node.args.kwonlyargs]
        facts.positional_params = params[1:]
    for stmt in _statements(node.body):
        if isinstance(stmt, ast.Return) and stmt.value is not None:
            returns.append((shape_of_ast(stmt.value), env))
        if not isinstance(stmt, (ast.Assign, ast.AnnAssign)) or stmt.value is None:
            continue
        _note_construction(stmt.value, env, constructions)
        if me is None:
            continue
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        for t in targets:
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == me:
                value = stmt.value
                if node.name == "__init__" and isinstance(value, ast.Name) and \
                        value.id in facts.init_params and value.id not in rebound:
                    facts.param_attrs.setdefault(value.id, []).append(t.attr)
                else:
                    facts.add(t.attr, shape_of_ast(value), env)
    return returns


def _note_construction(value: Optional[ast.AST], env: Env, constructions: list) -> None:
    if isinstance(value, ast.Await):
        value = value.value
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id not in env:
        constructions.append((value, env))


def _map_constructions(facts: ClassFacts, constructions: list) -> None:
    """The arguments of ``constructions`` (calls of the class) become its attributes' values.

    Positional arguments only where their order is known: a field class without bases
    (a base's fields come first) whose fields are all ``__init__`` parameters in order;
    ``__init__``'s own positional parameters."""
    if facts.field_class:
        keywords = [n for n in facts.fields if n not in facts.no_init]
        positional = keywords if facts.positional else []
        by_name = {n: [n] for n in keywords}
    else:
        keywords = facts.init_params
        positional = facts.positional_params
        by_name = facts.param_attrs
    for call, env in constructions:
        for i, arg in enumerate(call.args):
            if isinstance(arg, ast.Starred) or i >= len(positional):
                break
            for attr in by_name.get(positional[i], ()):
                facts.add(attr, shape_of_ast(arg), env)
        for kw in call.keywords:
            if kw.arg is not None and kw.arg in keywords:
                for attr in by_name.get(kw.arg, ()):
                    facts.add(attr, shape_of_ast(kw.value), env)


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
