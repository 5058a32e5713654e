"""The linter's entry points: one module (:func:`analyze_source`) or a project (:func:`analyze_project`).

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
import re
from typing import Optional, Sequence

from .facts.config import Config
from .facts.model import Finding
from .facts.prefilter import Prefilter
from .facts.syntax import source_lines
from .facts.wrappers import FileFacts, file_facts, project_config, with_wrappers
from .project.module_analysis import ModuleAnalyzer
from .project.project_analysis import ProjectAnalysis
from .selection.sources import FileProblem, noqa_filter
from .rules.subscriptions import RULES

__all__ = ["FileFacts", "ModuleAnalyzer", "Prefilter", "RULES", "analyze_file", "analyze_project",
           "analyze_source", "file_facts", "project_config", "source_lines"]

#: a module that may declare its own transaction wrapper, unique keys, managers or relations
#: (wrappers.py)
_WRAPPER_HINT = re.compile(r"unique|primary_key|OneToOneField|atomic|begin|transaction|lock|Manager|"
                           r"as_manager|ManyToMany|ForeignKey|GenericRelation|relationship|backref")


def analyze_source(source: str, cfg: Optional[Config] = None, filename: str = "",
                   tree: Optional[ast.AST] = None,
                   prefilter: Optional[Prefilter] = None) -> list[Finding]:
    """Findings for one module's source.  Raises SyntaxError if it does not parse."""
    cfg = cfg or Config()
    if _WRAPPER_HINT.search(source):
        if tree is None:
            tree = ast.parse(source)
        # one file shows its own classes, not the project's: which models are defined
        # elsewhere (``Config.defined_classes``) only a project's analysis can tell
        cfg = dataclasses.replace(with_wrappers(cfg, [(source, tree)]), defined_classes=cfg.defined_classes)
    mod = ModuleAnalyzer(source, tree, cfg, filename, prefilter, RULES)
    findings = mod.run()
    return [dataclasses.replace(f, path=filename) for f in findings]


def analyze_project(files: Sequence[tuple[str, str, ast.AST]], cfg: Optional[Config] = None,
                    roots: Sequence[str] = (), prefilter: Optional[Prefilter] = None,
                    facts: Optional[Sequence[FileFacts]] = None) -> dict[str, list[Finding]]:
    """Analyse many modules and join calls between them (``from x import helper``).

    What crosses modules, always through imports (``from x import name``, ``from pkg import
    module`` + ``module.name``, relative imports): helpers that write or re-read an entity,
    helpers that return an entity they read, versioned models and model policies (also
    through re-exports and subclasses).  ``facts``: each file's :class:`FileFacts`, in the
    order of ``files`` (from the project index), instead of reading them from the trees.
    The steps are :class:`~.project_analysis.ProjectAnalysis`'s."""
    if facts is not None:
        cfg = project_config(cfg or Config(), facts)
    else:
        cfg = with_wrappers(cfg or Config(), [(source, tree) for _path, source, tree in files])
    project = ProjectAnalysis(files, cfg, prefilter or Prefilter(cfg), roots, RULES)
    project.keep_helpers()
    project.analyze()
    project.join()
    return project.results()


def analyze_file(path: str, source: str, tree: ast.AST, cfg: Config,
                 prefilter: Optional[Prefilter] = None, noqa: bool = True) -> list[Finding]:
    """The findings of one file judged on its own (``--no-cross-module``), noqa applied
    unless ``noqa`` is false."""
    try:
        findings = analyze_source(source, cfg, path, tree=tree, prefilter=prefilter)
    except RecursionError:
        raise FileProblem("skipped: the code is nested too deeply to analyse") from None
    except Exception as exc:  # noqa: BLE001 - a lint run must never show a traceback
        raise FileProblem(f"internal error while analysing ({exc.__class__.__name__}: {exc}); "
                          f"please report it") from None
    return noqa_filter(findings, source) if noqa else findings
