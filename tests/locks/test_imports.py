"""The lock package has no import cycles (the project's rule), lazy imports included.

A function-level import is still an edge: ``backend.py`` once imported every
backend inside ``backend_from_url`` while every backend imports ``backend.py``.
Imports under ``if TYPE_CHECKING:`` never run and are not edges.
"""
from __future__ import annotations

import ast
from pathlib import Path

import txnsafety.locks

PACKAGE = "txnsafety.locks"
ROOT = Path(txnsafety.locks.__file__).parent


def _runtime_imports(tree: ast.AST) -> list[ast.ImportFrom | ast.Import]:
    found: list[ast.ImportFrom | ast.Import] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for sub in child.orelse:
                    visit(sub)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append(child)
            visit(child)
    visit(tree)
    return found


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> modules of this package it imports (at any depth of its code)."""
    modules = {p.stem for p in root.glob("*.py") if p.stem != "__init__"}
    graph: dict[str, set[str]] = {}
    for name in sorted(modules):
        tree = ast.parse((root / f"{name}.py").read_text())
        edges: set[str] = set()
        for node in _runtime_imports(tree):
            if isinstance(node, ast.ImportFrom):
                if node.level == 1:
                    targets = [node.module] if node.module else [a.name for a in node.names]
                elif node.level == 0 and node.module and node.module.startswith(PACKAGE + "."):
                    targets = [node.module[len(PACKAGE) + 1:]]
                else:
                    targets = []
                if node.level == 1 and node.module is None:
                    targets = [a.name for a in node.names]
            else:
                targets = [a.name[len(PACKAGE) + 1:] for a in node.names if a.name.startswith(PACKAGE + ".")]
            edges |= {t.split(".")[0] for t in targets if t and t.split(".")[0] in modules}
        graph[name] = edges - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = dfs(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = dfs(node)
            if found:
                return found
    return None


def test_the_graph_sees_lazy_imports_not_type_checking_ones(tmp_path: Path) -> None:
    (tmp_path / "base.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .lease import Lease\n"
        "def load():\n    from .memory import Memory\n")
    (tmp_path / "memory.py").write_text("from .base import Base\n")
    (tmp_path / "lease.py").write_text("from txnsafety.locks.base import Base\n")
    graph = import_graph(tmp_path)
    assert graph == {"base": {"memory"}, "memory": {"base"}, "lease": {"base"}}
    assert find_cycle(graph) == ["base", "memory", "base"]
    assert "backend" in import_graph()["memory"]


def test_no_import_cycle_in_the_lock_package() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, " -> ".join(cycle or [])
