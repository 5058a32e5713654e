"""One module's analysis: pick functions, walk them, join the calls between them.

The driver of the walk (``flow/walk.py``) for one file (what flake8 sees) and the part of a project
run (:func:`.analysis.analyze_project`) that each module does: loader helpers analysed on
demand, the callers of helpers whose summary matters, and the last pass that joins call
sites to callees (a helper writing its caller's row, an unprotected helper whose every
caller protects it).
"""
from __future__ import annotations

import ast
import os
import re
from typing import Optional

import libcst as cst
from libcst.metadata import ByteSpanPositionProvider, MetadataWrapper

from ..facts.config import Config, vocab_for
from ..facts.model import Finding
from ..facts.sessions import SessionTypes
from ..facts.syntax import source_lines
from ..facts.module_facts import ModuleInfo
from ..flow.subscribers import NO_RULES, Subscribers
from ..flow.walk import CallSite, FunctionAnalyzer, _Positions
from .call_joins import CallJoins
from ..facts.prefilter import Prefilter
from ..facts.self_reads import SelfReads


class ModuleAnalyzer:
    def __init__(self, source: str, tree: Optional[ast.AST], cfg: Config, filename: str = "",
                 prefilter: Optional[Prefilter] = None, subscribers: Subscribers = NO_RULES):
        self.source = source
        #: the rules the walks' events go to (handed in by the entry points: the walk and
        #: this driver never import a rule)
        self.subscribers = subscribers
        self.cfg = cfg
        self.filename = filename
        self.tree = tree
        self.findings: list[Finding] = []
        self.call_sites: list[CallSite] = []
        self.functions: dict[str, FunctionAnalyzer] = {}
        self.function_names: set[str] = set()
        self.module_aliases: set[str] = set()
        self.prefilter = prefilter or Prefilter(cfg)
        self.nested_seen = 0
        self.parsed_functions = 0
        #: module-level functions that may return an entity they read (analysed on demand)
        self.returner_candidates: dict[str, tuple] = {}
        #: (class, method) -> methods that may return an entity they read (``self.get(uid)``)
        self.method_candidates: dict[tuple[str, str], tuple] = {}
        #: (class, method) -> its analyzer, for ``row.method()`` calls on an entity
        self.methods: dict[tuple[str, str], FunctionAnalyzer] = {}
        #: id(function node) -> its analyzer (None: could not be parsed)
        self.analyzed: dict[int, Optional[FunctionAnalyzer]] = {}
        self.busy: set[int] = set()
        #: helpers being analysed on demand, across modules (shared by analyze_project)
        self.demand: list[int] = []
        #: (name, module alias) -> (module, name) of an imported function; set by analyze_project
        self.resolve_external = None
        #: only here for its loader helpers (analyze_project): nothing of its own is analysed
        self.loaders_only = False
        #: a loaders-only module's other functions: analysed only when they call a model
        #: method that writes its row (analysis._method_callers)
        self.dormant: list[tuple] = []
        #: (class, method) -> every method that returns or yields something: a view's
        #: ``self._chosen_device(user)`` may hand on what another loader returned
        self.handing_methods: dict[tuple[str, str], tuple] = {}
        #: the calls a handing method must make to hand out a row (``loader_method``)
        self._hands_on_re: Optional["re.Pattern[str]"] = None
        #: resolves sessions made by factories (this module alone, or the project's modules)
        self.session_types: Optional[SessionTypes] = None
        #: method name -> (module, item) of the one loader method of that name in the project
        #: (``repo.find_by_external_id(..)`` on a receiver the walk cannot type); set by
        #: analyze_project, else this module's own
        self.loader_methods: Optional[dict] = None

    def add(self, f: Finding) -> None:
        self.findings.append(f)

    def policy_of(self, model: Optional[str]) -> Optional[str]:
        """The txnsafety policy of ``model`` as this module knows it (declared here, inherited
        or, under ``txnsafety lint``, imported)."""
        return self.info.policies.get(model) if model else None

    def run(self) -> list[Finding]:
        """Analyse this module on its own (flake8 sees one file at a time)."""
        if not self.prepare():
            return []
        # Alone, a module can only make a session from SQLAlchemy's own names (sessions.py):
        # without one of them in its text, nothing it holds resolves to a session.
        if _SESSION_WORDS.search(self.source):
            self.session_types = SessionTypes({self.filename: self.tree})
        self.analyze()
        self.resolve_calls([self], self.call_sites, lambda site: self.functions.get(site.callee))
        return self.results()

    def prepare(self, loaders: bool = False, keep: bool = False, relevant: bool = False) -> bool:
        """Cheap stage: is the module worth analysing, and which functions.

        ``loaders``: the module is known not to be relevant; keep it if it may hold helpers
        that return an entity (another module's callers may need them), or if ``keep``.
        ``relevant``: the project knows it is (it calls another module's loader helper and
        stores rows)."""
        pf = self.prefilter
        if loaders or not (relevant or pf.module_relevant(self.source)):
            if not keep and not (loaders and _HANDS_OUT.search(self.source) and pf.f_gets.search(self.source)):
                return False
            self.loaders_only = True
        if self.tree is None:
            self.tree = ast.parse(self.source)
        self.info = ModuleInfo(self.tree, self.cfg, self.source)
        self.self_reads = SelfReads(self.tree)
        self.vocab = vocab_for(self.info.frameworks, self.cfg)
        lines = source_lines(self.source, keepends=True)
        self.picked = []
        self.rest = []
        for fnode, cls in self.info.functions:
            start = min([fnode.lineno] + [d.lineno for d in fnode.decorator_list])
            end = fnode.end_lineno or fnode.lineno
            text = "".join(lines[start - 1:end])
            item = (fnode, cls, start, text)
            if cls is not None and _HANDS_OUT.search(text):
                self.handing_methods[(cls, fnode.name)] = item
            if _HANDS_OUT.search(text) and pf.f_gets.search(text):
                if cls is None:
                    self.returner_candidates[fnode.name] = item
                else:
                    self.method_candidates[(cls, fnode.name)] = item
            if self.loaders_only:
                self.dormant.append(item)
                continue
            if fnode.name in self.info.txn_targets or pf.function_relevant(text):
                self.picked.append(item)
                self.function_names.add(fnode.name)
            else:
                self.rest.append(item)
        if self.returner_candidates and self.rest:
            self.pick_callers(_calls_re(self.returner_candidates))
        if self.method_candidates and self.rest:
            self.pick_callers(re.compile(r"\bself\.(?:%s)\(" % "|".join(
                sorted({re.escape(name) for _cls, name in self.method_candidates}))))
        return True

    def pick_callers(self, calls: "re.Pattern[str]") -> None:
        """Also pick the functions that get an entity from a loader helper (``calls``) and
        change and write something."""
        pf = self.prefilter
        keep = []
        for item in self.rest:
            text = item[3]
            if calls.search(text) and pf.f_writes.search(text) and \
                    (pf.mut.search(text) or pf.check.search(text)) or \
                    pf.acts_on_answer(text) and calls.search(_body(item)):
                self.picked.append(item)
                self.function_names.add(item[0].name)
            else:
                keep.append(item)
        self.rest = keep

    def returned_by(self, name: str, alias: Optional[str], attr: str = "returned") -> Optional[tuple]:
        """(Returned, helper name, file name if another module) for a call of ``name``
        (``alias.name`` for a module imported under ``alias``), if that function returns an
        entity it read (``attr="yielded"``: rows it hands out to be iterated, row_streams.py)."""
        if alias is None and name in self.returner_candidates:
            return self._loaded(self, self.returner_candidates[name], name, attr)
        if self.resolve_external is None or (alias or name) not in self.info.imports:
            return None
        target = self.resolve_external(name, alias)
        if target is None:
            # ``Device.from_persistent_id(..)``: an imported class's loader method
            return self.returned_by_name(name, attr) if alias and alias[:1].isupper() else None
        other, other_name = target
        item = other.returner_candidates.get(other_name)
        return self._loaded(other, item, name, attr) if item is not None else None

    def returned_by_method(self, cls: str, name: str, attr: str = "returned") -> Optional[tuple]:
        """Like ``returned_by`` for ``self.name(...)`` in a method of ``cls``: a repository's
        or a view's own loader method (``self.get(uid)``, ``self.load_order()``)."""
        item = self.loader_method(cls, name)
        return self._loaded(self, item, f"self.{name}", attr) if item is not None else None

    def loader_method(self, cls: str, name: str) -> Optional[tuple]:
        """The method ``cls.name`` if it may hand out a row: it reads one itself (a loader
        candidate), or it returns or yields and calls something that may, a helper, an
        imported name or another such method (a view's ``self._chosen_device(user)`` handing
        on what ``Device.from_persistent_id()`` read).  The text test is cheap; analysing
        every method that returns something, as callers ask, was most of a run's cost."""
        item = self.method_candidates.get((cls, name))
        if item is not None:
            return item
        item = self.handing_methods.get((cls, name))
        if item is None or not self._hands_on().search(_body(item)):
            return None
        return item

    def _hands_on(self) -> "re.Pattern[str]":
        """Calls through which a method that reads nothing itself may hand out a row
        (``from_helper``, ``iterated_helper``, ``property_row``): a function of this module
        (or, when other modules resolve, an imported name), a loader method any table may
        resolve, or another handing method that qualifies (to a fixed point)."""
        if self._hands_on_re is None:
            called = set(self.returner_candidates)
            if self.resolve_external is not None:
                called |= set(self.info.imports) | self.module_aliases
            methods = {name for _cls, name in self.method_candidates} | set(self.loader_methods or ())
            pending = dict(self.handing_methods)
            while True:
                pattern = _calls_pattern(called, methods)
                found = {key for key, item in pending.items() if pattern.search(_body(item))}
                if not found:
                    break
                methods |= {name for _cls, name in found}
                for key in found:
                    del pending[key]
            self._hands_on_re = pattern
        return self._hands_on_re

    def returned_by_name(self, name: str, attr: str = "returned") -> Optional[tuple]:
        """Like ``returned_by_method`` for ``obj.name(...)`` on any receiver: the project's one
        loader method of that name (a repository's ``find_zone``, a service's ``get_project``)."""
        table = self.loader_methods if self.loader_methods is not None else unique_loader_methods([self])
        found = table.get(name)
        return self._loaded(found[0], found[1], f".{name}", attr) if found is not None else None

    def _loaded(self, other: "ModuleAnalyzer", item: tuple, label: str,
                attr: str = "returned") -> Optional[tuple]:
        """(Returned, ``label``, file name if ``other`` is another module) when the function
        ``item`` of module ``other`` returns an entity it read (analysed now if needed)."""
        fa = other.demand_item(item)
        got = getattr(fa, attr, None) if fa is not None else None
        if got is None:
            return None
        return got, label, "" if other is self else (os.path.basename(other.filename) or "another module")

    def demand_item(self, item: tuple) -> Optional[FunctionAnalyzer]:
        """The analyzer of loader candidate ``item``, analysing it now if needed (three
        helpers deep at most; a recursive helper is not followed into itself)."""
        key = id(item[0])
        if key in self.analyzed:
            return self.analyzed[key]
        if key in self.busy or len(self.demand) >= 3:
            return None
        self.demand.append(key)
        try:
            return self.analyze_function(*item)
        finally:
            self.demand.pop()

    def helper_names(self) -> set[str]:
        """Module-level functions that other modules may call: the picked ones and the
        functions that call them (three levels, by text)."""
        names = {fnode.name for fnode, cls, _s, _t in self.picked if cls is None}
        wanted = set(names) | {fnode.name for fnode, _c, _s, _t in self.picked}
        rest = [it for it in self.rest if it[1] is None]
        for _round in range(3):
            if not wanted or not rest:
                break
            calls = re.compile(r"\b(?:%s)\(" % "|".join(sorted(re.escape(n) for n in wanted)))
            wanted = {it[0].name for it in rest if calls.search(it[3])}
            names |= wanted
            rest = [it for it in rest if it[0].name not in wanted]
        return names

    def analyze(self, external: Optional[set[str]] = None,
                loader_calls: Optional["re.Pattern[str]"] = None) -> None:
        """libcst stage.  ``external``: names imported from other modules that are helpers;
        ``loader_calls``: calls of other modules' loader helpers."""
        if self.loaders_only:
            return
        self.function_names |= set(external or ())
        if loader_calls is not None and self.rest:
            self.pick_callers(loader_calls)
        for fnode, cls, start, text in self.picked:
            self.analyze_function(fnode, cls, start, text)
        # then the callers of helpers whose summary matters: under a lock, or holding a read
        wanted = set(external or ()) | {
            name for name, fa in self.functions.items()
            if fa.param_writes or fa.rmw_getters or fa.deferred or fa.creates}
        for _round in range(3):            # callers, their callers, and theirs
            if not wanted or not self.rest:
                break
            calls = re.compile(r"\b(?:%s)\(" % "|".join(sorted(re.escape(n) for n in wanted)))
            keep, wanted = [], set()
            for item in self.rest:
                if calls.search(item[3]):
                    self.analyze_function(*item)
                    wanted.add(item[0].name)
                    self.function_names.add(item[0].name)
                else:
                    keep.append(item)
            self.rest = keep

    def results(self) -> list[Finding]:
        seen = set()
        out = []
        for f in sorted(self.findings, key=Finding.sort_key):
            k = (f.line, f.code)
            if k not in seen:
                seen.add(k)
                out.append(f)
        return out

    def analyze_matching(self, pattern: "re.Pattern", sites: list, names: frozenset = frozenset()) -> bool:
        """Walk the functions not walked yet (kept back by the prefilter, or in a module kept
        for its loaders) whose text matches ``pattern``: the callers a project summary needs
        after all. Their call sites join ``sites``; ``names`` become callable helpers here.
        Whether any was walked."""
        pool = self.dormant if self.loaders_only else self.rest
        keep = []
        found = False
        for item in pool:
            if pattern.search(item[3]):
                before = len(self.call_sites)
                self.function_names |= names
                self.analyze_function(*item)
                sites.extend(self.call_sites[before:])
                found = True
            else:
                keep.append(item)
        pool[:] = keep
        return found

    def analyze_function(self, fnode, cls, start: int, text: str) -> Optional[FunctionAnalyzer]:
        """Analyse one function (once: a loader helper may have been analysed on demand)."""
        key = id(fnode)
        if key in self.analyzed or key in self.busy:
            return self.analyzed.get(key)
        self.busy.add(key)
        try:
            fa = self._analyze_function(fnode, cls, start, text)
        finally:
            self.busy.discard(key)
        self.analyzed[key] = fa
        return fa

    def _analyze_function(self, fnode, cls, start: int, text: str) -> Optional[FunctionAnalyzer]:
        indented = text[:1] in (" ", "\t")
        src = ("if 1:\n" + text) if indented else text
        offset = start - 1 - (1 if indented else 0)
        try:
            module = cst.parse_module(src)
        except Exception:
            return None
        wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        positions = _Positions(wrapper.resolve(ByteSpanPositionProvider), src)
        fdef = module.body[0]
        if indented:
            fdef = fdef.body.body[0]
        if not isinstance(fdef, cst.FunctionDef):
            return None
        self.parsed_functions += 1
        qual = f"{cls}.{fnode.name}" if cls else fnode.name
        fa = FunctionAnalyzer(self, fdef, positions, offset, qual, is_method=cls is not None)
        fa.run()
        self.functions.setdefault(fnode.name, fa)
        if cls is not None:
            self.methods[(cls, fnode.name)] = fa
        return fa

    @staticmethod
    def resolve_calls(modules: list, call_sites: list, lookup, complete=None) -> None:
        """Join call sites to the functions they call (``lookup(site)`` finds the callee);
        ``complete(callee, n)``: whether ``n`` resolved calls are all the calls there are
        (:mod:`.call_joins`)."""
        CallJoins(call_sites, lookup, complete).run(modules)


#: names the frameworks give their own methods: a project's override is not "the one" of them
_FRAMEWORK_METHODS = frozenset({"get_object", "get_queryset", "get_or_create", "update_or_create",
                                "get_object_or_404", "get_or_404", "first_or_404", "one_or_404",
                                "get_context_data", "get_form", "get_form_kwargs", "get_initial",
                                "get_success_url", "get_serializer", "get_by_natural_key",
                                "get_instance", "to_internal_value", "to_representation"})


def unique_loader_methods(modules: list) -> dict:
    """Method name -> (module, item) for loader methods whose name only one class defines.

    Only names specific enough to be the project's own (two words or more: ``find_zone``,
    ``get_by_external_id``): a one-word ``get`` or ``load`` is every mapping's too."""
    seen: dict[str, list] = {}
    for m in modules:
        for (_cls, name), item in m.method_candidates.items():
            if "_" in name.strip("_") and not name.startswith("__") and name not in _FRAMEWORK_METHODS:
                seen.setdefault(name, []).append((m, item))
    return {name: found[0] for name, found in seen.items() if len(found) == 1}


#: What a module must mention to make a SQLAlchemy session on its own (``sessionmaker``,
#: ``async_sessionmaker``, ``scoped_session``, ``async_scoped_session``, ``Session(...)``).
_SESSION_WORDS = re.compile(r"sessionmaker|scoped_session|Session")


#: a function that hands something out: its callers may get a row read here
_HANDS_OUT = re.compile(r"return|yield")


def _calls_pattern(called: set[str], methods: set[str]) -> "re.Pattern[str]":
    """``name(`` / ``name.`` for ``called``, ``.name`` for ``methods`` (never matches if both are empty)."""
    parts = [r"\b(?:%s)\s*[.(]" % "|".join(sorted(map(re.escape, called)))] if called else []
    if methods:
        parts.append(r"\.(?:%s)\b" % "|".join(sorted(map(re.escape, methods))))
    return re.compile("|".join(parts) or r"(?!)")


def _body(item: tuple) -> str:
    """A picked candidate's text from its body on (its own ``def`` line names it)."""
    fnode, _cls, start, text = item
    return "".join(text.splitlines(True)[max(fnode.body[0].lineno - start, 0):])


def _calls_re(names) -> "re.Pattern[str]":
    """Calls of module-level functions ``names`` (not methods of the same name)."""
    return re.compile(r"(?<![\w.])(?:%s)\(" % "|".join(sorted(re.escape(n) for n in names)))
