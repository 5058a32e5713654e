"""A whole project's analysis: which modules to analyse, how their imports resolve, and
the joins of calls across modules.

``analysis.analyze_project`` runs the steps of :class:`ProjectAnalysis` in order:

1. **choose** — every module's cheap ``ast`` stage (``ModuleAnalyzer.prepare``); the ones
   the text test passes over are kept back (``skipped``) with their import facts;
2. **keep helpers** — a kept-back module comes back when an analysed one needs it: it
   calls a model method that writes its row (``method_callers``), it holds a loader
   helper an analysed module imports, or it acts on another module's lookup answer;
   versioned models and policies then cross the imports (``_share_models``);
3. **analyse** — each module's functions with libcst, knowing which imported names are
   helpers and which calls fetch rows from another module's loaders;
4. **join** — call sites to the functions they call: model methods through their rows,
   parameters written by callees, then summaries up the call graph (``resolve_calls``).

What crosses modules always goes through imports (``from x import name``, ``from pkg
import module`` + ``module.name``, relative imports).
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import os
import re
from typing import Optional, Sequence

from . import method_callers, param_chains
from ..facts.config import Config
from ..flow.walk import CallSite, FunctionAnalyzer
from ..flow.subscribers import NO_RULES, Subscribers
from ..facts.model import Finding
from .module_analysis import ModuleAnalyzer, unique_loader_methods
from ..facts.module_facts import ModuleFacts, inherit_policies, inherit_versioned
from ..facts.prefilter import Prefilter
from ..facts.sessions import SessionTypes


def module_names(path: str, roots: Sequence[str]) -> list[str]:
    """The dotted names ``path`` may be imported by, one per root that holds it (the root
    itself and its parent: ``src/pkg/mod.py`` is ``pkg.mod`` and ``src.pkg.mod``)."""
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


class ProjectAnalysis:
    """The modules of one project run, their import facts and the analysers made so far."""

    def __init__(self, files: Sequence[tuple[str, str, ast.AST]], cfg: Config, prefilter: Prefilter,
                 roots: Sequence[str], subscribers: Subscribers = NO_RULES):
        self.files = files
        self.cfg = cfg
        #: the rules every module's walks report to (handed in by the entry points)
        self.subscribers = subscribers
        self.prefilter = prefilter
        self.mods: dict[str, ModuleAnalyzer] = {}
        self.facts: dict[str, object] = {}            # path -> ModuleInfo or ModuleFacts
        self.index: dict[str, str] = {}               # dotted module name (and its suffixes) -> path
        self.dotted_of: dict[str, str] = {}
        self.demand: list[int] = []                   # loader helpers being analysed, across modules
        self.skipped: dict[str, tuple[str, ast.AST]] = {}
        for path, source, tree in files:
            m = ModuleAnalyzer(source, tree, cfg, path, prefilter, self.subscribers)
            if m.prepare():
                self._adopt(path, m)
            else:
                self.skipped[path] = (source, tree)
                self.facts[path] = ModuleFacts(tree)
        # analysed modules take a shared suffix first, as they always did
        for path in sorted(self.facts, key=lambda p: p not in self.mods):
            for name in module_names(path, roots or ["."]):
                self.dotted_of.setdefault(path, name)
                parts = name.split(".")
                for i in range(len(parts)):
                    self.index.setdefault(".".join(parts[i:]), path)

    def _adopt(self, path: str, m: ModuleAnalyzer) -> None:
        self.mods[path] = m
        m.demand = self.demand
        self.facts[path] = m.info

    # -- imports

    def resolve(self, path: str, alias: str, as_module: bool = False) -> Optional[tuple[str, str]]:
        """(module path, name) that ``alias`` imported in ``path`` names (``as_module``: the
        module itself, ``from pkg import services``), if the project holds it."""
        imports = self.facts[path].imports
        if alias not in imports:
            return None
        modname, name, level = imports[alias]
        if as_module:
            modname, name = (modname + "." + name) if modname else name, ""
        if level:
            here = self.dotted_of.get(path, "")
            parts = here.split(".") if here else []
            base = parts if path.endswith("__init__.py") else parts[:-1]
            if level - 1:
                base = base[: -(level - 1)] if len(base) >= level - 1 else []
            modname = ".".join(base + ([modname] if modname else []))
        other = self.index.get(modname)
        if other is None or other == path:
            return None
        return other, name

    def target(self, m: ModuleAnalyzer, alias: str, as_module: bool = False
               ) -> Optional[tuple[ModuleAnalyzer, str]]:
        """Like :meth:`resolve`, for an analysed module: (its analyser, name)."""
        t = self.resolve(m.filename, alias, as_module)
        if t is None or t[0] not in self.mods:
            return None
        return self.mods[t[0]], t[1]

    def resolve_external(self, m: ModuleAnalyzer, name: str, alias: Optional[str]) -> Optional[tuple]:
        """``ModuleAnalyzer.resolve_external`` of ``m``: ``alias.name`` or imported ``name``."""
        if alias is not None:
            t = self.target(m, alias, as_module=True)
            return (t[0], name) if t is not None else None
        return self.target(m, name)

    # -- step 2: modules kept back that an analysed one needs

    def keep_helpers(self) -> None:
        # a module that only calls a model method writing its row (``d.verify_token(t)``) on
        # rows it got elsewhere: kept, its calls of those methods analysed (method_callers.py)
        self.bases, self.defined = method_callers.class_facts(self.facts, self.files)
        callers_too = method_callers.caller_modules(
            self.skipped, method_callers.self_writing_names(self.mods.values(), self.bases))
        for path in callers_too:
            other = ModuleAnalyzer(*self.skipped.pop(path), self.cfg, path, self.prefilter, self.subscribers)
            other.prepare(loaders=True, keep=True)
            other.info.versioned |= self.facts[path].versioned
            self._adopt(path, other)
        self._keep_loader_modules(callers_too)
        _revive_answer_callers(self, {path: (source, tree) for path, source, tree in self.files
                                      if path not in self.mods})
        _share_models(self.facts, self.resolve, self.cfg.versioned_models)

    def _keep_loader_modules(self, callers_too: Sequence[str]) -> None:
        """A module that only reads (kept back) may hold loader helpers that an analysed
        module imports and calls: keep those modules too (for their loaders only)."""
        for path in [p for p in self.mods if not self.mods[p].loaders_only or p in callers_too]:
            source = self.mods[path].source
            for alias in self.facts[path].imports:
                if alias + "(" not in source and alias + "." not in source:
                    continue
                for as_module in (False, True):
                    t = self.resolve(path, alias, as_module)
                    if t is None or t[0] not in self.skipped:
                        continue
                    other = ModuleAnalyzer(*self.skipped.pop(t[0]), self.cfg, t[0], self.prefilter,
                                           self.subscribers)
                    if other.prepare(loaders=True):
                        kept = self.facts[t[0]]
                        other.info.versioned |= kept.versioned
                        for name, policy in kept.policies.items():
                            other.info.policies.setdefault(name, policy)
                        self._adopt(t[0], other)

    # -- step 3: libcst

    def analyze(self) -> None:
        helpers = {id(m): m.helper_names() for m in self.mods.values()}
        session_types = SessionTypes({path: tree for path, _source, tree in self.files}, self.resolve)
        plans = []
        for m in self.mods.values():
            m.session_types = session_types
            m.resolve_external = functools.partial(self.resolve_external, m)
            plans.append((m, *self._imported_helpers(m, helpers)))
        loader_methods = unique_loader_methods(list(self.mods.values()))
        method_calls = re.compile(r"\.(?:%s)\(" % "|".join(sorted(map(re.escape, loader_methods)))) \
            if loader_methods else None
        for m in self.mods.values():
            m.loader_methods = loader_methods
        for m, external, loader_calls in plans:
            if method_calls is not None:
                loader_calls = method_calls if loader_calls is None else \
                    re.compile(loader_calls.pattern + "|" + method_calls.pattern)
            m.analyze(external, loader_calls)

    def _imported_helpers(self, m: ModuleAnalyzer, helpers: dict) -> tuple[set[str], Optional[re.Pattern]]:
        """(imported names that are helpers, calls of other modules' loader helpers) for ``m``."""
        external: set[str] = set()
        loaders = set()
        for alias in m.info.imports:
            t = self.target(m, alias)
            if t is not None:
                if t[1] in helpers[id(t[0])]:
                    external.add(alias)
                if t[1] in t[0].returner_candidates:
                    loaders.add(re.escape(alias) + r"\(")
            t = self.target(m, alias, as_module=True)
            if t is not None:
                if helpers[id(t[0])]:
                    m.module_aliases.add(alias)
                    external |= helpers[id(t[0])]
                if t[0].returner_candidates:
                    loaders.add(re.escape(alias) + r"\.(?:%s)\(" % "|".join(
                        sorted(re.escape(n) for n in t[0].returner_candidates)))
        m.function_names |= external
        return external, (re.compile(r"(?<![\w.])(?:%s)" % "|".join(sorted(loaders))) if loaders else None)

    # -- step 4: calls across functions and modules

    def lookup(self, site: CallSite) -> Optional[FunctionAnalyzer]:
        """The function a call site calls: of the module it names, its own, an imported
        one, or the model method of a row (``row.method()``)."""
        m = site.caller.mod
        if site.module_alias is not None:
            t = self.target(m, site.module_alias, as_module=True)
            return t[0].functions.get(site.callee) if t is not None else None
        local = m.functions.get(site.callee)
        if local is not None:
            return local
        if site.callee in m.info.imports:
            t = self.target(m, site.callee)
            if t is not None:
                return t[0].functions.get(t[1])
        return method_callers.method_of(site, self.methods, self.bases, self.defined)

    def join(self) -> None:
        sites = [site for m in self.mods.values() for site in m.call_sites]
        #: model methods that write ``self`` (or defer a write), by name (method_callers.py)
        self.methods: dict[str, list[tuple[str, FunctionAnalyzer]]] = {}
        for m in self.mods.values():
            for (cls, name), fa in m.methods.items():
                if ("self" in fa.param_writes or fa.deferred) and method_callers.is_model(cls, m.info, self.bases):
                    self.methods.setdefault(name, []).append((cls, fa))
        calls_seen = method_callers.analyse_callers(self.mods, self.methods, sites, self.files) \
            if self.methods else {}
        param_chains.pass_on(self.mods, sites, self.lookup)
        ModuleAnalyzer.resolve_calls(list(self.mods.values()), sites, self.lookup,
                                     complete=lambda fa, n: calls_seen.get(fa.name, n) <= n)

    def results(self) -> dict[str, list[Finding]]:
        out = {}
        for path, m in self.mods.items():
            if m.loaders_only and not m.findings:
                continue
            out[path] = [dataclasses.replace(f, path=path) for f in m.results()]
        return out


def _revive_answer_callers(project: ProjectAnalysis, others: dict) -> None:
    """A module the text test passed over can still act on another module's lookup: it
    calls a loader helper (an imported function, a module's, or the project's one method of
    that name) and stores rows through a method (``if not project: repo.create_from(project)``):
    analyse it too (``flow/presence.py`` pairs the helper's answer with the store)."""
    mods = project.mods
    methods = unique_loader_methods(list(mods.values()))
    method_calls = re.compile(r"\.(?:%s)\(" % "|".join(sorted(map(re.escape, methods)))) if methods else None
    for path, (source, tree) in others.items():
        if not project.prefilter.stores_through_method(source):
            continue
        calls = method_calls is not None and method_calls.search(source) is not None
        for alias in project.facts[path].imports if not calls else ():
            for as_module in (False, True):
                t = project.resolve(path, alias, as_module)
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
        m = ModuleAnalyzer(source, tree, project.cfg, path, project.prefilter, project.subscribers)
        if m.prepare(relevant=True):
            project._adopt(path, m)


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
