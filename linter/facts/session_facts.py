"""What one module's ``ast`` says about where sessions come from, read lazily.

Per class: its attributes' shapes (annotations, class-level and ``self.X`` assignments,
constructor arguments mapped to fields); per function: its return shapes and the
environment of its own scope.  :class:`.sessions.SessionTypes` resolves names from these
facts; nothing here decides what is a session.
"""
from __future__ import annotations

import ast
from typing import Iterator, Optional, Union

from .session_shapes import Shape, shape_of_ast

#: decorators and bases that make constructor arguments the class's fields, in order
_FIELD_CLASSES = {"dataclass", "define", "frozen", "mutable", "NamedTuple"}


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
