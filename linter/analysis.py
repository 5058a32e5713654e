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

from .config import Config
from .dataflow import CallSite, FunctionAnalyzer
from . import method_callers, param_chains
from .model import Finding
from .module_analysis import ModuleAnalyzer, unique_loader_methods
from .module_facts import ModuleFacts, inherit_policies, inherit_versioned
from .prefilter import Prefilter
from .sessions import SessionTypes
from .syntax import source_lines
from .wrappers import FileFacts, file_facts, project_config, with_wrappers

__all__ = ["FileFacts", "ModuleAnalyzer", "Prefilter", "analyze_project", "analyze_source",
           "file_facts", "project_config", "source_lines"]

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
        cfg = with_wrappers(cfg, [(source, tree)])
    mod = ModuleAnalyzer(source, tree, cfg, filename, prefilter)
    findings = mod.run()
    return [dataclasses.replace(f, path=filename) for f in findings]


def _module_names(path: str, roots: Sequence[str]) -> list[str]:
    import os
    names = []
    ap = os.path.abspath(path)
    for root in roots:
        r = os.path.abspath(root)
        if os.path.isfile(r):
            r = os.path.dirname(r)
        for base in (r, os.path.dirname(r)):
            if ap.startswith(base + os.sep):
                rel = os.path.relpath(ap, base)[:-3].replace(os.sep, ".")
                if rel.endswith(".__init__"):
                    rel = rel[: -len(".__init__")]
                names.append(rel)
    return names


def analyze_project(files: Sequence[tuple[str, str, ast.AST]], cfg: Optional[Config] = None,
                    roots: Sequence[str] = (), prefilter: Optional[Prefilter] = None,
                    facts: Optional[Sequence[FileFacts]] = None) -> dict[str, list[Finding]]:
    """Analyse many modules and join calls between them (``from x import helper``).

    What crosses modules, always through imports (``from x import name``, ``from pkg import
    module`` + ``module.name``, relative imports): helpers that write or re-read an entity,
    helpers that return an entity they read, versioned models and model policies (also
    through re-exports and subclasses).  ``facts``: each file's :class:`FileFacts`, in the
    order of ``files`` (from the project index), instead of reading them from the trees."""
    if facts is not None:
        cfg = project_config(cfg or Config(), facts)
    else:
        cfg = with_wrappers(cfg or Config(), [(source, tree) for _path, source, tree in files])
    prefilter = prefilter or Prefilter(cfg)
    mods: dict[str, ModuleAnalyzer] = {}
    facts: dict[str, object] = {}            # path -> ModuleInfo or ModuleFacts
    index: dict[str, str] = {}               # dotted module name (and its suffixes) -> path
    dotted_of: dict[str, str] = {}
    demand: list[int] = []                   # loader helpers being analysed, across modules
    skipped: dict[str, tuple[str, ast.AST]] = {}
    for path, source, tree in files:
        m = ModuleAnalyzer(source, tree, cfg, path, prefilter)
        if m.prepare():
            mods[path] = m
            m.demand = demand
            facts[path] = m.info
        else:
            skipped[path] = (source, tree)
            facts[path] = ModuleFacts(tree)
    # analysed modules take a shared suffix first, as they always did
    for path in sorted(facts, key=lambda p: p not in mods):
        for name in _module_names(path, roots or ["."]):
            dotted_of.setdefault(path, name)
            parts = name.split(".")
            for i in range(len(parts)):
                index.setdefault(".".join(parts[i:]), path)

    def resolve(path: str, alias: str, as_module: bool = False) -> Optional[tuple[str, str]]:
        imports = facts[path].imports
        if alias not in imports:
            return None
        modname, name, level = imports[alias]
        if as_module:                       # ``from pkg import services``
            modname, name = (modname + "." + name) if modname else name, ""
        if level:
            here = dotted_of.get(path, "")
            parts = here.split(".") if here else []
            is_pkg = path.endswith("__init__.py")
            base = parts if is_pkg else parts[:-1]
            if level - 1:
                base = base[: -(level - 1)] if len(base) >= level - 1 else []
            modname = ".".join(base + ([modname] if modname else []))
        other = index.get(modname)
        if other is None or other == path:
            return None
        return other, name

    def target(m: ModuleAnalyzer, alias: str, as_module: bool = False
               ) -> Optional[tuple[ModuleAnalyzer, str]]:
        t = resolve(m.filename, alias, as_module)
        if t is None or t[0] not in mods:
            return None
        return mods[t[0]], t[1]

    # a module that only calls a model method writing its row (``d.verify_token(t)``) on rows
    # it got elsewhere: kept, its calls of those methods analysed (method_callers.py)
    bases, defined = method_callers.class_facts(facts, files)
    callers_too = method_callers.caller_modules(
        skipped, method_callers.self_writing_names(mods.values(), bases))
    for path in callers_too:
        other = ModuleAnalyzer(*skipped.pop(path), cfg, path, prefilter)
        other.prepare(loaders=True, keep=True)
        mods[path] = other
        other.demand = demand
        other.info.versioned |= facts[path].versioned
        facts[path] = other.info
    # a module that only reads (skipped above) may hold loader helpers that an analysed
    # module imports and calls: keep those modules too (for their loaders only)
    for path in [p for p in mods if not mods[p].loaders_only or p in callers_too]:
        source = mods[path].source
        for alias in facts[path].imports:
            if alias + "(" not in source and alias + "." not in source:
                continue
            for as_module in (False, True):
                t = resolve(path, alias, as_module)
                if t is not None and t[0] in skipped:
                    other_source, other_tree = skipped.pop(t[0])
                    other = ModuleAnalyzer(other_source, other_tree, cfg, t[0], prefilter)
                    if other.prepare(loaders=True):
                        mods[t[0]] = other
                        other.demand = demand
                        other.info.versioned |= facts[t[0]].versioned
                        for name, policy in facts[t[0]].policies.items():
                            other.info.policies.setdefault(name, policy)
                        facts[t[0]] = other.info
    _revive_answer_callers(mods, {path: (source, tree) for path, source, tree in files if path not in mods},
                           facts, resolve, cfg, prefilter, demand)
    _share_models(facts, resolve, cfg.versioned_models)
    helpers = {id(m): m.helper_names() for m in mods.values()}

    def resolver(m: ModuleAnalyzer):
        def resolve_external(name: str, alias: Optional[str]) -> Optional[tuple]:
            if alias is not None:
                t = target(m, alias, as_module=True)
                return (t[0], name) if t is not None else None
            return target(m, name)
        return resolve_external

    session_types = SessionTypes({path: tree for path, _source, tree in files},
                                 lambda path, alias, as_module: resolve(path, alias, as_module))
    plans = []
    for m in mods.values():
        m.session_types = session_types
        m.resolve_external = resolver(m)
        external = set()
        loaders = set()
        for alias in m.info.imports:
            t = target(m, alias)
            if t is not None:
                if t[1] in helpers[id(t[0])]:
                    external.add(alias)
                if t[1] in t[0].returner_candidates:
                    loaders.add(re.escape(alias) + r"\(")
            t = target(m, alias, as_module=True)
            if t is not None:
                if helpers[id(t[0])]:
                    m.module_aliases.add(alias)
                    external |= helpers[id(t[0])]
                if t[0].returner_candidates:
                    loaders.add(re.escape(alias) + r"\.(?:%s)\(" % "|".join(
                        sorted(re.escape(n) for n in t[0].returner_candidates)))
        m.function_names |= external
        plans.append((m, external, re.compile(r"(?<![\w.])(?:%s)" % "|".join(sorted(loaders)))
                      if loaders else None))
    loader_methods = unique_loader_methods(list(mods.values()))
    method_calls = re.compile(r"\.(?:%s)\(" % "|".join(sorted(map(re.escape, loader_methods)))) \
        if loader_methods else None
    for m in mods.values():
        m.loader_methods = loader_methods
    for m, external, loader_calls in plans:
        if method_calls is not None:
            loader_calls = method_calls if loader_calls is None else \
                re.compile(loader_calls.pattern + "|" + method_calls.pattern)
        m.analyze(external, loader_calls)
    sites = [site for m in mods.values() for site in m.call_sites]

    def lookup(site: CallSite):
        m = site.caller.mod
        if site.module_alias is not None:
            t = target(m, site.module_alias, as_module=True)
            return t[0].functions.get(site.callee) if t is not None else None
        local = m.functions.get(site.callee)
        if local is not None:
            return local
        if site.callee in m.info.imports:
            t = target(m, site.callee)
            if t is not None:
                return t[0].functions.get(t[1])
        return method_of(site)

    def method_of(site: CallSite) -> Optional[FunctionAnalyzer]:
        """``row.method()`` on an entity: the model method of that name (method_callers.py)."""
        return method_callers.method_of(site, methods, bases, defined)

    methods: dict[str, list[tuple[str, FunctionAnalyzer]]] = {}
    for m in mods.values():
        for (cls, name), fa in m.methods.items():
            if ("self" in fa.param_writes or fa.deferred) and method_callers.is_model(cls, m.info, bases):
                methods.setdefault(name, []).append((cls, fa))
    calls_seen = method_callers.analyse_callers(mods, methods, sites, files) if methods else {}
    param_chains.pass_on(mods, sites, lookup)
    ModuleAnalyzer.resolve_calls(list(mods.values()), sites, lookup,
                                 complete=lambda fa, n: calls_seen.get(fa.name, n) <= n)
    out = {}
    for path, m in mods.items():
        if m.loaders_only and not m.findings:
            continue
        out[path] = [dataclasses.replace(f, path=path) for f in m.results()]
    return out


def _revive_answer_callers(mods: dict, others: dict, facts: dict, resolve, cfg: Config,
                           prefilter: Prefilter, demand: list) -> None:
    """A module the text test passed over can still act on another module's lookup: it
    calls a loader helper (an imported function, a module's, or the project's one method of
    that name) and stores rows through a method (``if not project: repo.create_from(project)``):
    analyse it too (``presence.py`` pairs the helper's answer with the store)."""
    methods = unique_loader_methods(list(mods.values()))
    method_calls = re.compile(r"\.(?:%s)\(" % "|".join(sorted(map(re.escape, methods)))) if methods else None
    for path, (source, tree) in others.items():
        if not prefilter.stores_through_method(source):
            continue
        calls = method_calls is not None and method_calls.search(source) is not None
        for alias in facts[path].imports if not calls else ():
            for as_module in (False, True):
                t = resolve(path, alias, as_module)
                other = mods.get(t[0]) if t is not None else None
                if other is None or not other.returner_candidates:
                    continue
                names = other.returner_candidates if as_module else {t[1]} & set(other.returner_candidates)
                prefix = re.escape(alias) + (r"\." if as_module else "")
                if names and re.search(prefix + r"(?:%s)\(" % "|".join(map(re.escape, names)) if as_module
                                       else r"(?<![\w.])" + re.escape(alias) + r"\(", source):
                    calls = True
        if not calls:
            continue
        m = ModuleAnalyzer(source, tree, cfg, path, prefilter)
        if m.prepare(relevant=True):
            mods[path] = m
            m.demand = demand
            facts[path] = m.info


def _share_models(facts: dict, resolve, configured: set) -> None:
    """Versioned models and model policies cross modules through imports: ``from .models
    import Doc``, ``from app import models`` (+ ``models.Doc``), re-exports and subclasses of
    a versioned (or policy-declaring) base.  A fixpoint over the import graph; nothing to do
    when no module declares either (configured ``versioned-models`` apply everywhere
    already)."""
    own = {path: set(f.versioned) - configured for path, f in facts.items()}
    policies = {path: f.policies for path, f in facts.items()}
    if not any(own.values()) and not any(policies.values()):
        return
    # each import resolved once: (alias, module path, name) or (alias, module path, None)
    links: dict[str, list] = {}
    for path, f in facts.items():
        out = links[path] = []
        for alias in f.imports:
            t = resolve(path, alias)
            if t is not None:
                out.append((alias, t[0], t[1]))
            t = resolve(path, alias, as_module=True)
            if t is not None:
                out.append((alias, t[0], None))
    for _round in range(8):
        changed = False
        for path, f in facts.items():
            mine, mine_p = own[path], policies[path]
            for alias, other, name in links[path]:
                if name is not None:
                    if alias not in mine and name in own[other]:
                        mine.add(alias)
                        changed = True
                    if alias not in mine_p and name in policies[other]:
                        mine_p[alias] = policies[other][name]
                        changed = True
                    continue
                # ``models.Doc``: the analysis knows a model by its last name
                new = own[other] - mine - set(f.class_bases)
                if new and alias not in mine:
                    mine |= new
                    changed = True
                for model, policy in policies[other].items():
                    if model not in mine_p and model not in f.class_bases:
                        mine_p[model] = policy
                        changed = True
            if inherit_versioned(mine, f.class_bases):
                changed = True
            if inherit_policies(mine_p, f.class_bases):
                changed = True
        if not changed:
            break
    for path, f in facts.items():
        f.versioned |= own[path]
