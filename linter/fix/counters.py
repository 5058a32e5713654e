"""Counters changed in Python and written back (TXN106): the database does the arithmetic.

Django: ``x.n += d; x.save()`` becomes ``Model.objects.filter(pk=x.pk).update(n=F("n") + d)``
at the save (the other fields of ``save(update_fields=[...])`` still saved by it, and
``x.refresh_from_db(fields=["n"])`` after it when the code reads ``x.n`` or hands ``x`` on
later).  SQLAlchemy: ``x.n += d`` becomes ``x.n = Model.n + d`` (``UPDATE ... SET n = n +
d`` at the flush).

Safe only in the exact shape where nothing else can tell the difference: the change and the
save in one block, ``x`` bound once by a read through ``Model.objects`` (Django), nothing
between them reading the counter, calling a method of ``x`` or handing ``x`` on, the delta
made of names nothing between re-binds; a whole-row ``save()`` only when the counters are
all it writes.  A model whose class (in the same file) overrides ``save()`` gets the fix as
unsafe: ``update()`` does not call it."""
from __future__ import annotations

import re
from typing import Optional

import libcst as cst

from ..facts.model import Finding
from .edits import line_edits
from .imports import binding, with_import
from .model import Applicability, Fix
from .regions import uses_between
from .shapes import (Counter, Save, class_defines, counter, delta_code, django_manager_root,
                     django_save, only_binding, sqlalchemy_model)
from .source import FileSource, Located
from .uses import has_call, names_in, uses_of

_CHANGED = re.compile(r"`(?P<obj>\w+)\.(?P<field>\w+)` changed in Python at line (?P<line>\d+)")


def changed(finding: Finding) -> Optional[tuple[str, str, int]]:
    """(name, field, line of the change) the finding's message names."""
    m = _CHANGED.search(finding.message)
    return (m["obj"], m["field"], int(m["line"])) if m else None


def counter_fix(src: FileSource, finding: Finding) -> Optional[Fix]:
    """The counter fix of a TXN106 finding, or None when its shape is not one we rewrite."""
    hint = changed(finding)
    loc = src.at(finding.line)
    if hint is None or loc is None or loc.function is None:
        return None
    save = django_save(loc.statement)
    if save is not None and save.obj == hint[0]:
        return _django(src, loc, save, hint[2])
    return _sqlalchemy(src, finding, hint)


# ------------------------------------------------------------------ Django

def _counters_before(loc: Located, obj: str) -> Optional[list[Counter]]:
    """The counters of ``obj`` among the statements before the save in its block, back to
    the first statement that does anything else with ``obj``."""
    found: list[Counter] = []
    for stmt in reversed(loc.block.body[:loc.index]):
        c = counter(stmt)
        if c is not None and c.obj == obj:
            found.append(c)
        elif uses_of(obj, [stmt]).calls or uses_of(obj, [stmt]).rebound:
            break
    found.reverse()
    if len({c.field for c in found}) != len(found):
        return None                     # one field changed twice: not one plain counter
    return found


def _django(src: FileSource, loc: Located, save: Save, change_line: int) -> Optional[Fix]:
    function = loc.function
    counters = _counters_before(loc, save.obj)
    if function is None or not counters or change_line not in {src.line_of(c.statement) for c in counters}:
        return None
    fields = {c.field for c in counters}
    if save.fields is not None and not fields <= set(save.fields):
        return None
    read = only_binding(function, save.obj)
    root = django_manager_root(read) if read is not None else None
    if root is None or not _undisturbed(src, loc, save, counters):
        return None
    model, alias = root
    manager = f"{model}.objects"
    if alias is not None:
        if not _stable(alias, function):
            return None                 # the row's database is not certainly the same at the save
        manager += f".using({src.code(alias)})"
    f_import = binding(src.module, "django.db.models", "F")
    if f_import is False or ("F" in names_in(function) and not f_import):
        return None
    refresh = _refresh_fields(src, loc, save.obj, counters)
    if refresh is None:
        return None
    new_block = _django_block(src, loc, save, counters, manager, refresh)
    tree = src.module.deep_replace(loc.block, new_block)
    if f_import is None:
        tree = with_import(tree, "django.db.models", "F")
    unsafe = class_defines(src.module, model, "save")
    shown = ", ".join(f'{c.field}=F("{c.field}") {c.op} ...' for c in counters)
    description = f"update `{save.obj}` atomically: `{manager}.filter(pk=...).update({shown})`"
    if unsafe:
        description += f" (`{model}.save()` is overridden and would no longer run for it)"
    return Fix(description, Applicability.UNSAFE if unsafe else Applicability.SAFE,
               line_edits(src.text, tree.code))


def _undisturbed(src: FileSource, loc: Located, save: Save, counters: list[Counter]) -> bool:
    """Nothing between the first change and the save can see that the counters are no
    longer changed in Python, and (a whole-row save) nothing else of the row was changed."""
    function = loc.function
    assert function is not None
    fields = {c.field for c in counters}
    first = src.line_of(counters[0].statement)
    skip = [c.statement for c in counters]
    between = uses_between(src, function, save.obj, first, src.line_of(loc.statement), skip)
    if between.bare or between.calls or between.rebound or (between.reads | between.sets) & fields:
        return False
    before = uses_between(src, function, save.obj, src.line_of(function), first, skip)
    if before.calls or before.bare or before.sets & fields:
        return False
    if save.fields is None and (before.sets or between.sets):
        return False                    # a whole-row save of other changes: not only the counter
    others = [s for s in loc.block.body[:loc.index]
              if src.line_of(s) > first and not any(s is k for k in skip)]
    if others and any(has_call(c.delta) for c in counters):
        return False                    # a delta that runs code is evaluated at the save now
    for name in set().union(*(names_in(c.delta) for c in counters)):
        moved = uses_of(name, others)
        if moved.rebound or moved.sets or moved.calls:
            return False                # the delta would be read after it changed
    if loc.in_loop:
        after = uses_between(src, function, save.obj, src.end_line_of(loc.statement) + 1)
        if after.bare or after.calls or (after.reads | after.sets) & fields:
            return False
    return True


def _refresh_fields(src: FileSource, loc: Located, obj: str,
                    counters: list[Counter]) -> Optional[list[str]]:
    """The counters to read back after the update: those the code reads later (all of them
    when it hands ``obj`` on or calls one of its methods)."""
    function = loc.function
    assert function is not None
    after = uses_between(src, function, obj, src.end_line_of(loc.statement) + 1)
    fields = [c.field for c in counters]
    if after.rebound and not (after.bare or after.calls or after.reads):
        return []
    if after.bare or after.calls:
        return fields
    return [f for f in fields if f in after.reads]


def _stable(alias: cst.BaseExpression, function: cst.FunctionDef) -> bool:
    """Whether ``alias`` means the same at the save as at the read: a string, or a
    parameter the function never re-binds."""
    if isinstance(alias, cst.SimpleString):
        return True
    if not isinstance(alias, cst.Name):
        return False
    params = {p.name.value for p in (*function.params.params, *function.params.kwonly_params,
                                     *function.params.posonly_params)}
    return alias.value in params and not uses_of(alias.value, [function.body]).rebound


def _django_block(src: FileSource, loc: Located, save: Save, counters: list[Counter],
                  manager: str, refresh: list[str]) -> cst.CSTNode:
    """The save's block with the counters' lines gone and the save rewritten."""
    cfg = src.module.config_for_parsing
    sets = ", ".join(f'{c.field}=F("{c.field}") {c.op} {delta_code(src.module, c.delta)}'
                     for c in counters)
    lines = [f"{manager}.filter(pk={save.obj}.pk).update({sets})"]
    if save.fields is not None:
        rest = [el for el, name in zip(save.elements, save.fields)
                if name not in {c.field for c in counters}]
        if rest:
            items = ", ".join(src.code(el) for el in rest)
            if save.bracket == "()" and len(rest) == 1:
                items += ","
            lines.append(f"{save.obj}.save(update_fields={save.bracket[0]}{items}{save.bracket[1]})")
    if refresh:
        names = ", ".join(f'"{field}"' for field in refresh)
        lines.append(f"{save.obj}.refresh_from_db(fields=[{names}])")
    old = loc.statement
    assert isinstance(old, cst.SimpleStatementLine)
    new = [cst.parse_statement(line + "\n", config=cfg) for line in lines]
    new[0] = new[0].with_changes(leading_lines=old.leading_lines,
                                 trailing_whitespace=old.trailing_whitespace)
    body = list(loc.block.body)
    body[loc.index:loc.index + 1] = new
    return loc.block.with_changes(body=_without(body, [c.statement for c in counters]))


def _without(body: list, gone: list) -> list:
    """``body`` without the statements ``gone``, their comments kept on the next line."""
    out: list = []
    carried: list = []
    for stmt in body:
        if any(stmt is g for g in gone):
            carried.extend(stmt.leading_lines)
            comment = stmt.trailing_whitespace.comment
            if comment is not None:
                carried.append(cst.EmptyLine(comment=comment))
            continue
        if carried:
            stmt = stmt.with_changes(leading_lines=[*carried, *stmt.leading_lines])
            carried = []
        out.append(stmt)
    return out


# ------------------------------------------------------------------ SQLAlchemy

def _sqlalchemy(src: FileSource, finding: Finding, hint: tuple[str, str, int]) -> Optional[Fix]:
    obj, field, line = hint
    loc = src.at(line)
    if loc is None or loc.function is None or loc.in_loop:
        return None
    c = counter(loc.statement)
    if c is None or (c.obj, c.field) != (obj, field) or "flushed" not in finding.message:
        return None
    function = loc.function
    flush = src.at(finding.line)
    if flush is None:
        return None
    end = src.end_line_of(flush.statement) + 1
    if finding.line < line and not src.line_of(flush.statement) < line < end:
        return None                     # the block that commits must hold the change
    between = uses_between(src, function, obj, src.end_line_of(c.statement) + 1, end)
    if between.bare or between.calls or between.rebound or field in (between.reads | between.sets):
        return None
    read = only_binding(function, obj)
    if read is None:
        return None
    model = sqlalchemy_model(read)
    if model is None:
        return None                     # the class is not named where the row is read
    later = uses_between(src, function, obj, end)
    small = cst.parse_statement(
        f"{obj}.{field} = {model}.{field} {c.op} {delta_code(src.module, c.delta)}\n",
        config=src.module.config_for_parsing)
    assert isinstance(small, cst.SimpleStatementLine)
    new = c.statement.with_changes(body=small.body)
    tree = src.module.deep_replace(c.statement, new)
    description = f"let the database add: `{obj}.{field} = {model}.{field} {c.op} ...`"
    read_later = later.bare or later.calls or field in later.reads
    if read_later:
        description += f" (`{obj}.{field}` read later is loaded again from the database)"
    return Fix(description, Applicability.UNSAFE if read_later else Applicability.SAFE,
               line_edits(src.text, tree.code))
