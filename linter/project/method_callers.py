"""Model methods that write their own row, and the code that calls them on rows it holds.

``device.verify_token(t)`` in a form, ``message.defer()`` in a queue runner: the method
changes and saves ``self``; the row was read by its caller, often in a module that reads
and never writes a row itself (the prefilter passes it by) and through a helper that
returns or yields the rows.  This module

* names the methods worth following from their text (a model class's method that sets a
  field of ``self`` and saves it), so that modules calling them are kept
  (:func:`caller_modules`) and the calling functions analysed (:func:`analyse_callers`);
* resolves ``row.method()`` to a method (:func:`method_of`): by the row's model when the
  read shows it, else the one model class defining it, else, when several subclasses
  override one method of a common base (a plug-in's ``TOTPDevice.verify_token`` over
  ``Device.verify_token``), the override that loses the most (a derived value over a
  blind one): every override is a candidate for a row whose class the code picked at run
  time.
"""
from __future__ import annotations

import ast
import re
from typing import Optional, Sequence

from ..facts.module_facts import _MODEL_BASES
from ..facts.prefilter import _SELF_SET, _SELF_WRITE

#: names too common to mark a module as calling a row-writing model method by its text
_COMMON = frozenset({"save", "delete", "update", "clean", "full_clean", "refresh_from_db", "get",
                     "set", "add", "remove", "create", "put", "run", "send", "close", "open"})


def self_writing_names(mods, bases: dict) -> set[str]:
    """Names of model methods whose text sets a field of ``self`` and saves the row."""
    names: set[str] = set()
    for m in mods:
        if m.loaders_only or m.info is None:
            continue
        lines = m.source.splitlines(keepends=True)
        for fnode, cls in m.info.functions:
            if cls is None or fnode.name in _COMMON or fnode.name.startswith("__"):
                continue
            text = "".join(lines[fnode.lineno - 1:fnode.end_lineno or fnode.lineno])
            if _SELF_SET.search(text) and _SELF_WRITE.search(text) and is_model(cls, m.info, bases):
                names.add(fnode.name)
    return names


def caller_modules(skipped: dict, names: set[str]) -> list[str]:
    """Paths of modules the prefilter passed by that call one of ``names`` on something."""
    if not names:
        return []
    pattern = re.compile(r"\.(?:%s)\(" % "|".join(sorted(re.escape(n) for n in names)))
    return [path for path, (source, _tree) in skipped.items() if pattern.search(source)]


def analyse_callers(mods: dict, methods: dict, sites: list, files: Sequence) -> dict[str, int]:
    """Analyse the functions that call a row-writing model method (``row.verify(t)``) so
    their calls are judged, and count the calls the project's text holds: a method's own
    finding is dropped for protected callers only when every call was seen."""
    pattern = re.compile(r"\.(%s)\(" % "|".join(sorted(re.escape(n) for n in methods)))
    for m in mods.values():
        # a module kept for its loaders, or for these calls, may call the method on its rows
        m.analyze_matching(pattern, sites)
    counts: dict[str, int] = {}
    for _path, source, _tree in files:
        for found in pattern.finditer(source):
            counts[found.group(1)] = counts.get(found.group(1), 0) + 1
    return counts


def method_of(site, methods: dict, bases: dict, defined: dict):
    """The model method ``row.name()`` calls (``site.receiver`` is the row), or None.

    ``methods``: name -> [(class, analyzer)] of model methods that write ``self``;
    ``bases``: class -> its bases' names, over the project; ``defined``: method name ->
    the classes that define it."""
    if site.receiver is None or site.module_alias is not None:
        return None
    found = methods.get(site.callee, [])
    model = site.receiver.model
    if model is not None:
        found = [(cls, fa) for cls, fa in found if cls == model]
        return found[0][1] if len(found) == 1 else None
    if len(found) == 1:
        cls = found[0][0]
        others = set(defined.get(site.callee, ())) - {cls} - _ancestors(cls, bases)
        # another class defines a method of that name too (``update()`` of a config and of
        # a base every model shares): a row of unknown model may be calling that one
        return None if others else found[0][1]
    if len(found) > 1 and _overrides(site.callee, [cls for cls, _fa in found], bases, defined):
        return max(found, key=lambda cf: (_loses(cf[1]), cf[0]))[1]
    return None


def is_model(cls: str, info, bases: dict) -> bool:
    """Whether ``cls`` is a model class: as its module shows, or through bases declared in
    other modules (``TOTPDevice(ThrottlingMixin, Device)``, ``Device(models.Model)``)."""
    if info.is_model_class(cls):
        return True
    return any(b.endswith("Model") or b in _MODEL_BASES for b in _ancestors(cls, bases))


def _ancestors(cls: str, bases: dict) -> set[str]:
    seen: set[str] = set()
    todo = list(bases.get(cls, ()))
    while todo:
        b = todo.pop()
        if b not in seen:
            seen.add(b)
            todo.extend(bases.get(b, ()))
    return seen


def _overrides(name: str, classes: list[str], bases: dict, defined: dict) -> bool:
    """Whether ``classes`` all override ``name`` of one common project base class."""
    common: Optional[set[str]] = None
    for cls in classes:
        anc = _ancestors(cls, bases)
        common = anc if common is None else common & anc
    return bool(common and common & set(defined.get(name, ())))


def _loses(fa) -> int:
    """How much an override's write of ``self`` loses: derived or counted beats blind."""
    _line, relevant, _kind = fa.param_writes["self"]
    return sum(1 for m in relevant if m.kind != "blind")


def class_facts(facts: dict, files: Sequence) -> tuple[dict, dict]:
    """(class -> bases, method name -> classes defining it) over every module: the bases
    from each module's facts, the methods from its tree's top-level classes."""
    bases: dict[str, list[str]] = {}
    defined: dict[str, set[str]] = {}
    for info in facts.values():
        for cls, names in getattr(info, "class_bases", {}).items():
            bases.setdefault(cls, list(names))
    for _path, _source, tree in files:
        for node in getattr(tree, "body", ()):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        defined.setdefault(item.name, set()).add(node.name)
    return bases, defined
