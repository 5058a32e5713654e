"""The house rules the code's shape must keep: imports run one way, functions and modules stay short.

Why a test: a circle between two modules means neither can be read, tested or replaced without
the other, and it creeps back one "small" import at a time (issue 30 found three in the runtime).
The graph is built from the source with :mod:`ast`, not by importing, so it sees every import
the code *could* run:

- module-level and function-level (lazy) imports alike: a lazy import still ties the two
  modules together, it only hides the knot until the function runs;
- imports under ``if TYPE_CHECKING:`` too: they never run, but they are the same design
  dependency (``lease`` naming ``Backend`` as what it calls while ``backend`` named ``Lease``
  as what its methods take), and issue 30 counts them;
- relative imports resolved against the importing module's package;
- ``from pkg import name`` is an edge to ``pkg.name`` when that is a module of the package,
  to ``pkg`` itself otherwise.

A module's parent packages are not edges: Python runs ``pkg/__init__.py`` before
``pkg.mod``, but counting that would make every package whose ``__init__`` re-exports its
parts circular, and the re-export is the public API.

``PACKAGES`` is the list the checks run over; each entry is a directory under the repository
root and the dotted name it imports as.

The linter is laid out as its pipeline (``docs/architecture.md``), and its stages import one
way: :data:`LINTER_LAYERS` says which stages each may import, and an import against it fails
with the importing module and what it imported.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pytest

REPO = Path(__file__).resolve().parent.parent

#: (directory under the repository, the name it imports as)
PACKAGES: list[tuple[str, str]] = [("txnsafety", "txnsafety"), ("linter", "txnsafety_lint")]

#: the linter's stages and the stages each may import besides itself ("" is the entry points
#: at the top, which may import anything); ``rules.registry`` is a leaf of data every stage
#: may read (the codes and their defaults)
LINTER_LAYERS: dict[str, frozenset[str]] = {
    "selection": frozenset({"facts"}),
    "facts": frozenset(),
    "flow": frozenset({"facts"}),
    "rules": frozenset({"flow", "facts"}),
    "project": frozenset({"flow", "facts", "selection"}),
    "report": frozenset({"facts", "selection", "fix"}),
    "fix": frozenset({"facts"}),
}
#: modules any stage may import
LINTER_LEAVES = frozenset({"txnsafety_lint.rules.registry"})
#: what no rule may import: the walk's class (rules see the function's state and events)
RULES_NEVER = frozenset({"txnsafety_lint.flow.walk"})

#: the house limits (helper notes: no function over 60 lines, no module over ~500)
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 500

#: folders left out of the function-length check only (not of the circle or module checks):
#: none now (issue 33's work split txnsafety/sqlalchemy/); kept for a package mid-split
FUNCTION_LENGTH_EXCLUDED: dict[str, list[str]] = {}


@dataclass(frozen=True)
class Module:
    """One source file of a package: its dotted name, its path, and whether it is a package."""

    name: str
    path: Path
    is_package: bool


def package_modules(directory: Path, package: str) -> dict[str, Module]:
    """Every ``.py`` file under ``directory`` by its dotted name (``__init__`` is the package)."""
    modules: dict[str, Module] = {}
    for path in sorted(directory.rglob("*.py")):
        parts = list(path.relative_to(directory).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        name = ".".join([package, *parts])
        modules[name] = Module(name, path, is_package)
    return modules


def _absolute_base(importer: Module, node: ast.ImportFrom) -> str:
    """The module a ``from ... import`` names, with a relative one resolved against ``importer``."""
    if node.level == 0:
        return node.module or ""
    package = importer.name if importer.is_package else importer.name.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return ".".join(part for part in (package, node.module) if part)


def _known_prefix(dotted: str, modules: dict[str, Module]) -> str | None:
    """The longest prefix of ``dotted`` that is a module of the package (``a.b.c`` -> ``a.b``)."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def imported_modules(importer: Module, modules: dict[str, Module]) -> set[str]:
    """The package's modules that ``importer`` imports anywhere in its code."""
    tree = ast.parse(importer.path.read_text(encoding="utf-8"), filename=str(importer.path))
    targets: set[str | None] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets |= {_known_prefix(alias.name, modules) for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = _absolute_base(importer, node)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                targets.add(submodule if submodule in modules else _known_prefix(base, modules))
    return {target for target in targets if target is not None and target != importer.name}


def import_graph(directory: Path, package: str) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports."""
    modules = package_modules(directory, package)
    return {name: imported_modules(module, modules) for name, module in modules.items()}


def strongly_connected_components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iteratively (a deep package must not hit the recursion limit)."""
    index: dict[str, int] = {}
    lowlink: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = lowlink[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = lowlink[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    lowlink[node] = min(lowlink[node], index[successor])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    lowlink[parent] = min(lowlink[parent], lowlink[node])
                if lowlink[node] == index[node]:
                    component: list[str] = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
    return components


def circle_through(component: list[str], graph: dict[str, set[str]]) -> list[str]:
    """One concrete circle inside a component, from its first module back to it (shortest path)."""
    start = component[0]
    members = set(component)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for successor in sorted(graph[node] & members):
                if successor == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if successor not in came_from:
                    came_from[successor] = node
                    following.append(successor)
        frontier = following
    raise AssertionError(f"no circle through {start} in component {component}")


def import_circles(graph: dict[str, set[str]]) -> list[str]:
    """Each circle as ``a -> b -> a``, one per strongly connected component of two or more."""
    return sorted(" -> ".join(circle_through(component, graph))
                  for component in strongly_connected_components(graph) if len(component) > 1)


def function_lengths(path: Path) -> list[tuple[str, int]]:
    """Every function in ``path`` (nested ones too) by qualified name and line count, def to last line."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    found.append((name, child.end_lineno - child.lineno + 1))
                visit(child, name + ".")
            else:
                visit(child, prefix)
    visit(tree, "")
    return found


def too_long(directory: Path, package: str, excluded: Sequence[str] = ()) -> list[str]:
    """``module:function (N lines)`` for every long function, ``module (N lines)`` for long modules."""
    problems: list[str] = []
    for name, module in package_modules(directory, package).items():
        lines = len(module.path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_MODULE_LINES:
            problems.append(f"{name} ({lines} lines)")
        if any(module.path.is_relative_to(directory / folder) for folder in excluded):
            continue
        problems += [f"{name}:{function} ({length} lines)"
                     for function, length in function_lengths(module.path) if length > MAX_FUNCTION_LINES]
    return problems


@pytest.mark.parametrize(("folder", "package"), PACKAGES)
def test_no_import_circle(folder: str, package: str) -> None:
    graph = import_graph(REPO / folder, package)
    assert any(graph.values()), f"no imports found in {folder}/: a wrong folder or package name?"
    circles = import_circles(graph)
    assert not circles, "import circles:\n" + "\n".join(circles)


def layer_violations(graph: dict[str, set[str]], package: str, layers: dict[str, frozenset[str]],
                     leaves: frozenset[str] = frozenset(), never: dict[str, frozenset[str]] | None = None) -> list[str]:
    """``importer -> imported`` for every import from one stage into a stage it may not import."""
    def stage(name: str) -> str:
        parts = name.split(".")
        return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in layers) else ""
    problems = []
    for importer, targets in sorted(graph.items()):
        mine = stage(importer)
        if not mine:
            continue            # the entry points may import anything
        for target in sorted(targets):
            theirs = stage(target)
            forbidden = (never or {}).get(mine, frozenset())
            if target in forbidden or (target not in leaves and theirs != mine and theirs not in layers[mine]):
                problems.append(f"{importer} -> {target}")
    return problems


def test_the_linter_stages_import_one_way() -> None:
    graph = import_graph(REPO / "linter", "txnsafety_lint")
    problems = layer_violations(graph, "txnsafety_lint", LINTER_LAYERS, LINTER_LEAVES, {"rules": RULES_NEVER})
    assert not problems, "imports against the stages (docs/architecture.md):\n" + "\n".join(problems)


def test_the_layer_check_names_an_import_up_the_pipeline(tmp_path: Path) -> None:
    package = _write(tmp_path / "lint", {
        "__init__.py": "",
        "cli.py": "from .rules import judge\nfrom .flow import walk\n",
        "facts/__init__.py": "", "facts/model.py": "",
        "flow/__init__.py": "", "flow/walk.py": "from ..facts import model\nfrom ..rules import judge\n",
        "flow/state.py": "",
        "rules/__init__.py": "", "rules/judge.py": "from ..flow import state, walk\n",
        "rules/registry.py": "",
    })
    layers = {"facts": frozenset(), "flow": frozenset({"facts"}), "rules": frozenset({"flow", "facts"})}
    assert layer_violations(import_graph(package, "lint"), "lint", layers, frozenset(),
                            {"rules": frozenset({"lint.flow.walk"})}) == [
        "lint.flow.walk -> lint.rules.judge", "lint.rules.judge -> lint.flow.walk"]


@pytest.mark.parametrize(("folder", "package"), PACKAGES)
def test_no_long_function_or_module(folder: str, package: str) -> None:
    problems = too_long(REPO / folder, package, FUNCTION_LENGTH_EXCLUDED.get(folder, []))
    assert not problems, "over the house limits:\n" + "\n".join(problems)


def _write(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_checker_names_a_lazy_relative_circle(tmp_path: Path) -> None:
    package = _write(tmp_path / "pkg", {
        "__init__.py": "from .config import settings\n",
        "config.py": "def reset():\n    from .sites import forget\n",
        "sites.py": "from .config import settings\n",
        "alone.py": "import pkg.config\n",
    })
    assert import_circles(import_graph(package, "pkg")) == ["pkg.config -> pkg.sites -> pkg.config"]


def test_the_checker_sees_type_checking_and_from_package_import_submodule(tmp_path: Path) -> None:
    package = _write(tmp_path / "pkg", {
        "__init__.py": "",
        "locks/__init__.py": "from .lease import Lease\n",
        "locks/backend.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import lease\n",
        "locks/lease.py": "from pkg.locks import backend\n",
        "judgement.py": "from .locks import Lease\n",
    })
    assert import_graph(package, "pkg") == {
        "pkg": set(),
        "pkg.judgement": {"pkg.locks"},
        "pkg.locks": {"pkg.locks.lease"},
        "pkg.locks.backend": {"pkg.locks.lease"},
        "pkg.locks.lease": {"pkg.locks.backend"},
    }
    assert import_circles(import_graph(package, "pkg")) == ["pkg.locks.backend -> pkg.locks.lease -> pkg.locks.backend"]


def test_the_checker_names_each_circle_of_a_longer_component(tmp_path: Path) -> None:
    package = _write(tmp_path / "pkg", {
        "__init__.py": "",
        "a.py": "from . import b\n",
        "b.py": "from .c import thing\n",
        "c.py": "from ..pkg import a\n",
        "d.py": "from .e import x\n",
        "e.py": "from .d import y\n",
    })
    assert import_circles(import_graph(package, "pkg")) == [
        "pkg.a -> pkg.b -> pkg.c -> pkg.a", "pkg.d -> pkg.e -> pkg.d"]


def test_the_length_check_names_long_functions_and_modules(tmp_path: Path) -> None:
    long_body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES - 1))
    package = _write(tmp_path / "pkg", {
        "__init__.py": "",
        "short.py": f"def fits():\n{long_body}",
        "long.py": f"class Holder:\n    def method():\n        pass\n{long_body}\n"
                   f"def grows():\n{long_body}    x = 0\n",
        "big.py": "x = 0\n" * (MAX_MODULE_LINES + 1),
        "skipped/__init__.py": f"def grows():\n{long_body}    x = 0\n",
    })
    assert too_long(package, "pkg", ["skipped"]) == [
        f"pkg.big ({MAX_MODULE_LINES + 1} lines)",
        f"pkg.long:grows ({MAX_FUNCTION_LINES + 1} lines)",
    ]
    assert "pkg.skipped:grows (61 lines)" in too_long(package, "pkg")
