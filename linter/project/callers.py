"""Functions that only run where races cannot: every caller the project shows is quiet code.

A file's role (``selection/roles.py``) says whether the code in it runs beside requests.  A function in
application code can still run only alone: ``create_page()`` in a CMS's public API called
only by its test fixtures, ``create_groups()`` called only by a ``post_migrate`` receiver.
Its findings are as quiet as its callers, so they are counted under the callers' group
(tests, migrations, scripts) instead of being shown.

The summary is computed to a fixed point over the project's call graph, by name: a function
is quiet when

* its name is defined once in the project (a name defined twice cannot be told apart by its
  calls), it is referenced at least once (a function nothing references is an entry point
  the framework calls: a view, a task, a signal handler), and
* every reference to it (a call, or a callback handed on) lies in a quiet file, in a
  ``pre_migrate`` / ``post_migrate`` receiver, or in a function already found quiet.

One reference from application code keeps it reported: that is the caller that races.

A **command-line command** (a function decorated ``@click.command()``, ``@cli.command()``,
``@app.cli.command()``, ``@manager.command`` in a module that imports Click, Typer or
Flask-Script) is quiet as a command wherever it lives, and so is what only commands call:
an operator runs it by hand (the ``init-db``, ``recount``, ``sync`` commands of a Flask or
CKAN site), as a Django management command is.

**Startup code** is quiet too, and what only it calls: Django's ``AppConfig.ready()``, a
Flask app factory (``create_app``, ``make_app``), ``@app.before_first_request`` and Quart's
``@app.before_serving``, FastAPI's and Starlette's ``@app.on_event("startup")``, a
``lifespan=`` handler or ``on_startup=[...]`` callbacks, aiohttp's ``app.on_startup.append(f)``.
So is a function the project calls only from some module's top-level code
(``configure_server()`` at the bottom of ``main.py``): it runs as the module is imported.
Each process runs it once before it serves a request, so two copies meet only when two
processes boot in the same instant (a preference row registered, a default group created).

A **job** is never quiet by its callers: a function in a ``tasks.py`` module (or a ``tasks/``
package: Celery's, RQ's and Huey's convention) or decorated as a task (``@shared_task``,
``@app.task``, ``@periodic_task``, ``@db_periodic_task``, ``@job``, ``@actor``).  A worker or a
scheduler runs it, again and again and beside requests, whoever else the project shows
calling it (a management command that runs it once by hand, its tests).
"""
from __future__ import annotations

import ast
import collections
import dataclasses
from typing import Iterable, Iterator, Mapping, Optional

from ..facts.ast_names import last_name
from ..selection.roles import QUIET, FileRole, QuietGroup

#: Django signals sent by ``migrate``: their receivers run with the deploy, alone
_MIGRATE_SIGNALS = frozenset({"post_migrate", "pre_migrate"})

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)

#: decorators that make a function a job a worker or scheduler runs
_TASK_DECORATORS = frozenset({"task", "shared_task", "periodic_task", "db_task", "db_periodic_task",
                              "job", "actor", "cron"})


def _is_job(path: str, fn: ast.AST) -> bool:
    """A function a worker or scheduler runs: defined in a tasks module, or decorated as a task."""
    parts = path.replace("\\", "/").split("/")
    if parts[-1] == "tasks.py" or "tasks" in parts[:-1]:
        return True
    return any(last_name(d.func if isinstance(d, ast.Call) else d) in _TASK_DECORATORS
               for d in getattr(fn, "decorator_list", ()))


@dataclasses.dataclass(frozen=True)
class Definition:
    path: str
    qualname: str
    name: str


@dataclasses.dataclass(frozen=True)
class Reference:
    path: str
    #: the qualified name of the function the reference is in (None: module or class level)
    caller: Optional[str]
    #: a call made by the module's own top-level code: it runs once, as the module is imported
    at_import: bool = False


#: modules whose ``@x.command`` / ``@x.group`` decorators make command-line commands
_CLI_LIBRARIES = frozenset({"click", "typer", "flask_script", "flask.cli", "asyncclick", "rich_click"})
_CLI_DECORATORS = frozenset({"command", "group"})


def _imports_cli(tree: ast.AST) -> bool:
    for node in getattr(tree, "body", ()):
        if isinstance(node, ast.Import) and any(a.name in _CLI_LIBRARIES for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.module in _CLI_LIBRARIES:
            return True
    return False


def _is_cli_command(fn: ast.AST) -> bool:
    """``@click.command()``, ``@cli.command("x")``, ``@manager.command``: a decorator that is
    an attribute named ``command`` or ``group`` (the module is known to import a CLI library)."""
    for deco in getattr(fn, "decorator_list", ()):
        target = deco.func if isinstance(deco, ast.Call) else deco
        if isinstance(target, ast.Attribute) and target.attr in _CLI_DECORATORS:
            return True
    return False


#: functions the app factory convention names; they run as a process starts
_APP_FACTORIES = frozenset({"create_app", "make_app"})
#: decorators (attributes) that run a function as the app starts
_STARTUP_DECORATORS = frozenset({"before_first_request", "before_serving"})
#: keywords of ``FastAPI(...)`` / ``Starlette(...)`` naming startup handlers
_STARTUP_KEYWORDS = frozenset({"lifespan", "on_startup"})


def _is_startup(fn: ast.AST, enclosing_bases: tuple[str, ...]) -> bool:
    """``AppConfig.ready()``, an app factory, or a function decorated to run at startup."""
    name = getattr(fn, "name", "")
    if name == "ready" and "AppConfig" in enclosing_bases:
        return True
    if name in _APP_FACTORIES and not enclosing_bases:
        return True
    for deco in getattr(fn, "decorator_list", ()):
        target = deco.func if isinstance(deco, ast.Call) else deco
        if isinstance(target, ast.Attribute) and target.attr in _STARTUP_DECORATORS:
            return True
        if isinstance(deco, ast.Call) and last_name(deco) == "on_event" and deco.args and \
                isinstance(deco.args[0], ast.Constant) and deco.args[0].value == "startup":
            return True
    return False


def _startup_handlers(call: ast.Call) -> Iterator[str]:
    """Names a call registers to run at startup: ``FastAPI(lifespan=f)``,
    ``Starlette(on_startup=[f])``, ``app.add_event_handler("startup", f)``,
    ``app.on_startup.append(f)``."""
    for kw in call.keywords:
        if kw.arg in _STARTUP_KEYWORDS:
            values = kw.value.elts if isinstance(kw.value, (ast.List, ast.Tuple)) else [kw.value]
            yield from (last_name(v) for v in values if isinstance(v, (ast.Name, ast.Attribute)))
    name = last_name(call)
    if name == "add_event_handler" and len(call.args) == 2 and \
            isinstance(call.args[0], ast.Constant) and call.args[0].value == "startup":
        yield last_name(call.args[1])
    if name == "append" and isinstance(call.func, ast.Attribute) and \
            last_name(call.func.value) == "on_startup" and call.args:
        yield last_name(call.args[0])


def _is_migrate_receiver(fn: ast.AST) -> bool:
    for deco in getattr(fn, "decorator_list", ()):
        if isinstance(deco, ast.Call) and last_name(deco) == "receiver" and \
                any(last_name(a) in _MIGRATE_SIGNALS for a in deco.args):
            return True
    return False


def _walk(tree: ast.AST) -> Iterator[tuple[ast.AST, Optional[str]]]:
    """Every node with the qualified name of the function (or class) around it."""
    stack: list[tuple[ast.AST, Optional[str]]] = [(c, None) for c in ast.iter_child_nodes(tree)]
    while stack:
        node, scope = stack.pop()
        yield node, scope
        if isinstance(node, (*_FUNCTIONS, ast.ClassDef)):
            inner = f"{scope}.{node.name}" if scope else node.name
            stack.extend((d, scope) for d in node.decorator_list)
            stack.extend((stmt, inner) for stmt in node.body)
            if isinstance(node, ast.ClassDef):
                stack.extend((b, scope) for b in [*node.bases, *node.keywords])
            else:
                stack.append((node.args, scope))
        else:
            stack.extend((c, scope) for c in ast.iter_child_nodes(node))


class CallGraph:
    """Definitions and references of the project's functions, by name."""

    def __init__(self, modules: Iterable[tuple[str, ast.AST]]):
        self.definitions: dict[str, list[Definition]] = collections.defaultdict(list)
        self.references: dict[str, list[Reference]] = collections.defaultdict(list)
        #: functions ``migrate`` runs: receivers of its signals
        self.migrate_receivers: set[tuple[str, str]] = set()
        #: jobs a worker or scheduler runs (never quiet by their callers)
        self.jobs: set[tuple[str, str]] = set()
        #: command-line commands an operator runs by hand
        self.commands: set[tuple[str, str]] = set()
        #: code each process runs once as it starts
        self.startup: set[tuple[str, str]] = set()
        seen: list[tuple[str, str, Optional[str], bool]] = []
        connected: set[str] = set()         # ``post_migrate.connect(handler)``
        started: set[str] = set()           # ``FastAPI(lifespan=lifespan)``
        for path, tree in modules:
            cli = _imports_cli(tree)
            bases: dict[Optional[str], tuple[str, ...]] = {None: ()}
            called_at_import: set[int] = set()      # ``configure_server()`` at module level
            for node, scope in _walk(tree):
                if isinstance(node, ast.ClassDef):
                    qualname = f"{scope}.{node.name}" if scope else node.name
                    bases[qualname] = tuple(last_name(b) for b in node.bases)
                elif isinstance(node, _FUNCTIONS):
                    self._define(path, node, scope, cli, bases.get(scope, ()))
                elif isinstance(node, ast.Call) and last_name(node) == "connect" and \
                        isinstance(node.func, ast.Attribute) and \
                        last_name(node.func.value) in _MIGRATE_SIGNALS and node.args:
                    connected.add(last_name(node.args[0]))
                elif isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
                    seen.append((path, last_name(node), scope, id(node) in called_at_import))
                if isinstance(node, ast.Call):
                    started.update(_startup_handlers(node))
                    if scope is None:
                        called_at_import.add(id(node.func))
        for path, name, scope, at_import in seen:
            if name in self.definitions and name not in connected:
                self.references[name].append(Reference(path, scope, at_import))
        for names, into in ((connected, self.migrate_receivers), (started, self.startup)):
            for name in names:
                into.update((d.path, d.qualname) for d in self.definitions.get(name, ()))

    def _define(self, path: str, node: ast.AST, scope: Optional[str], cli: bool,
                enclosing_bases: tuple[str, ...]) -> None:
        """One function's definition, and the seeds it is (receiver, command, startup, job)."""
        qualname = f"{scope}.{node.name}" if scope else node.name
        self.definitions[node.name].append(Definition(path, qualname, node.name))
        if _is_migrate_receiver(node):
            self.migrate_receivers.add((path, qualname))
        if cli and _is_cli_command(node):
            self.commands.add((path, qualname))
        if _is_startup(node, enclosing_bases):
            self.startup.add((path, qualname))
        if _is_job(path, node):
            self.jobs.add((path, qualname))


def quiet_functions(modules: Iterable[tuple[str, ast.AST]], roles: Mapping[str, FileRole]
                    ) -> dict[tuple[str, str], QuietGroup]:
    """``(path, qualname) -> the quiet group`` of each function in reported code whose
    every reference lies in quiet code (the group most of its references are in).  Every
    group counts as quiet here; :func:`quiet_group` lets an included group show it."""
    graph = CallGraph(modules)
    quiet_roles = dict(QUIET)
    found: dict[tuple[str, str], QuietGroup] = {
        key: QuietGroup.MIGRATIONS for key in graph.migrate_receivers
        if roles.get(key[0]) not in quiet_roles}
    for seeds, group in ((graph.commands, QuietGroup.COMMANDS), (graph.startup, QuietGroup.STARTUP)):
        found.update((key, group) for key in seeds
                     if roles.get(key[0]) not in quiet_roles and key not in graph.jobs)

    def group_of(ref: Reference) -> Optional[QuietGroup]:
        role = roles.get(ref.path)
        if role in quiet_roles:
            return quiet_roles[role]
        if ref.at_import:
            return QuietGroup.STARTUP
        scope = ref.caller
        while scope:                       # a reference in a nested function or a method
            if (ref.path, scope) in found:
                return found[(ref.path, scope)]
            scope = scope.rpartition(".")[0]
        return None

    changed = True
    while changed:
        changed = False
        for name, defs in graph.definitions.items():
            if len(defs) != 1 or name.startswith("__"):
                continue
            d = defs[0]
            key = (d.path, d.qualname)
            if key in found or key in graph.jobs or roles.get(d.path) in quiet_roles:
                continue
            refs = [r for r in graph.references.get(name, ()) if (r.path, r.caller) != key]
            if not refs:
                continue
            groups = [group_of(r) for r in refs]
            if all(g is not None for g in groups):
                found[key] = collections.Counter(groups).most_common(1)[0][0]
                changed = True
    return found


def quiet_group(quiet: Mapping[str, str], qualname: Optional[str],
                include: Iterable[QuietGroup] = ()) -> Optional[QuietGroup]:
    """The group hiding a finding in ``qualname`` (or in a function it is nested in), from
    ``quiet`` (qualified name -> group name, as :func:`quiet_functions` found it); None when
    there is none or ``include`` shows it."""
    scope = qualname or ""
    while scope:
        if scope in quiet:
            try:
                group = QuietGroup(quiet[scope])
            except ValueError:          # an index written by another version: ignore it
                return None
            return None if group in set(include) else group
        scope = scope.rpartition(".")[0]
    return None
