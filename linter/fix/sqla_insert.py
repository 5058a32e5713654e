"""Exists-then-create on SQLAlchemy (TXN105): a lookup that finds nothing, then
``session.add(M(k=v, ...))``, becomes one ``INSERT ... ON CONFLICT DO NOTHING``::

    tag = session.query(Tag).filter_by(name=name).first()
    if tag is None:
        session.add(Tag(name=name, color=color))

becomes ``session.execute(insert(Tag).values(name=name, color=color)
.on_conflict_do_nothing(index_elements=["name"]))``, with ``insert`` the project's dialect's
(``sqlalchemy.dialects.postgresql`` or ``.sqlite``: :mod:`.dialects`; a project whose
database cannot be told gets no fix).

Always **unsafe**: the statement needs a unique constraint on the looked-up columns (without
one PostgreSQL and SQLite refuse the ``ON CONFLICT`` target), which the fix's note writes
out for the user to add with its migration; the insert runs at once instead of at the
session's next flush.  Declined wherever the rewrite could change more than the race: the
row found or the new object used anywhere else, an ``else``, a miss branch that does more
than the add, keys the insert does not set to the looked-up values, a class whose
constructor, defaults, relationships or events the ORM runs and Core would not
(:mod:`.mapped`)."""
from __future__ import annotations

import ast
from typing import Optional

import libcst as cst

from ..facts.model import Finding
from .dialects import project_dialect
from .edits import line_edits
from .imports import with_import
from .mapped import ModelModule, core_insert_problem
from .model import Applicability, Fix, no_fix
from .shapes import only_small
from .source import FileSource, Located
from .sqla_lookups import Lookup, lookup
from .uses import has_call, names_in, uses_of


def _added(stmt: cst.CSTNode) -> Optional[tuple[str, str, list[cst.Arg]]]:
    """(session, model, keyword args) of ``session.add(M(k=v, ...))``."""
    small = only_small(stmt)
    if not isinstance(small, cst.Expr) or not isinstance(small.value, cst.Call):
        return None
    call = small.value
    if not isinstance(call.func, cst.Attribute) or call.func.attr.value != "add" or len(call.args) != 1 \
            or call.args[0].keyword or call.args[0].star:
        return None
    new = call.args[0].value
    if not isinstance(new, cst.Call) or not isinstance(new.func, cst.Name) \
            or any(a.keyword is None or a.star for a in new.args):
        return None
    return cst.Module([]).code_for_node(call.func.value), new.func.value, list(new.args)


def _tested(test: cst.BaseExpression, count: bool) -> Optional[cst.BaseExpression]:
    """What ``if not X:`` / ``if X is None:`` (a count: ``if X == 0:``) tests for a miss."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return test.expression
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        op, right = test.comparisons[0].operator, test.comparisons[0].comparator
        if not count and isinstance(op, cst.Is) and isinstance(right, cst.Name) and right.value == "None":
            return test.left
        if count and isinstance(op, cst.Equal) and isinstance(right, cst.Integer) and right.value == "0":
            return test.left
    return None


def _check(src: FileSource, loc: Located, guard: cst.If) -> Optional[tuple[Lookup, Optional[int]]]:
    """The lookup the ``if`` tests for a miss, and the index in the ``if``'s block of the
    statement that bound it (None: the lookup is in the test itself)."""
    for count in (False, True):
        tested = _tested(guard.test, count)
        if tested is None:
            continue
        found = lookup(tested)
        if found is not None and found.count == count:
            return found, None
        if isinstance(tested, cst.Name):
            bound = _binding_before(src, loc, guard, tested.value)
            if bound is not None and bound[0].count == count:
                return bound
    return None


def _binding_before(src: FileSource, loc: Located, guard: cst.If, name: str) -> Optional[tuple[Lookup, int]]:
    """``name = <lookup>`` earlier in the ``if``'s block, with nothing between using ``name``,
    re-binding what the lookup names, and ``name`` used nowhere else in the function."""
    block = loc.block
    at = next((i for i, s in enumerate(block.body) if s is guard), None)
    if at is None or loc.function is None:
        return None
    for i in range(at - 1, -1, -1):
        small = only_small(block.body[i])
        if isinstance(small, cst.Assign) and len(small.targets) == 1 \
                and isinstance(small.targets[0].target, cst.Name) and small.targets[0].target.value == name:
            found = lookup(small.value)
            between = block.body[i + 1:at]
            if found is None or uses_of(name, between).any \
                    or any(uses_of(n, between).rebound for n in names_in(small.value)):
                return None
            if _mentions(loc.function, name) != 2:       # bound here, tested there: nothing else
                return None
            return found, i
    return None


def _mentions(function: cst.FunctionDef, name: str) -> int:
    count = []

    class _Names(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            if node.value == name:
                count.append(node)
    function.body.visit(_Names())
    return len(count)


def _outer(src: FileSource, guard: cst.If) -> Optional[Located]:
    """Where the ``if`` itself sits (None for an ``elif``)."""
    loc = src.at(src.line_of(guard))
    return loc if loc is not None and loc.statement is guard else None


def sqlalchemy_insert_fix(src: FileSource, finding: Finding) -> Optional[Fix]:
    loc = src.at(finding.line)
    if loc is None or loc.function is None:
        return None
    added = _added(loc.statement)
    guard = loc.guarding_if() if added is not None else None
    outer = _outer(src, guard) if guard is not None else None
    if added is None or guard is None or outer is None:
        return None
    checked = _check(src, outer, guard)
    if checked is None:
        return None
    found, bound_at = checked
    session, model, args = added
    why = _declined(src, loc, guard, found, session, model, args)
    if why:
        return no_fix("no mechanical fix: " + why)
    evidence = project_dialect(src.path, src.text)
    if evidence.dialect is None:
        return no_fix("no mechanical fix: " + evidence.why_unknown())
    problem = core_insert_problem(model, [a.keyword.value for a in args],   # type: ignore[union-attr]
                                  ModelModule(ast.parse(src.text), src.path, src.text))
    if problem is not None:
        return no_fix("no mechanical fix: " + problem)
    return _rewrite(src, outer, guard, bound_at, found, session, model, args, evidence.dialect)


def _declined(src: FileSource, loc: Located, guard: cst.If, found: Lookup, session: str, model: str,
              args: list[cst.Arg]) -> str:
    """Why the shape is not rewritten ("" when it is)."""
    if loc.function is not None and loc.function.asynchronous is not None:
        return "an async function: the insert would need an await the add did not"
    if guard.orelse is not None:
        return "the check has an else branch"
    if len(loc.block.body) != 1:
        return "the miss branch does more than add the row"
    if found.model != model:
        return f"the check reads `{found.model}`, the insert adds `{model}`"
    if found.session is not None and found.session != session:
        return "the check and the insert use different sessions"
    values = {a.keyword.value: src.code(a.value) for a in args}                 # type: ignore[union-attr]
    if any(values.get(k) != v for k, v in found.keys):
        return "the new row does not set the looked-up columns to the looked-up values"
    keyed = {k for k, _v in found.keys}
    if any(has_call(a.value) for a in args if a.keyword is not None and a.keyword.value in keyed):
        return "a looked-up value runs code (evaluated twice before, once after)"
    return ""


def _insert_name(module: cst.Module, dialect: str) -> Optional[tuple[str, bool]]:
    """The name to call the dialect's ``insert`` by, and whether it must be imported."""
    wanted = f"sqlalchemy.dialects.{dialect}"
    taken = names_in(module)
    for stmt in module.body:
        for small in (stmt.body if isinstance(stmt, cst.SimpleStatementLine) else ()):
            if isinstance(small, cst.ImportFrom) and small.module is not None and not small.relative \
                    and not isinstance(small.names, cst.ImportStar) \
                    and cst.Module([]).code_for_node(small.module) == wanted:
                for alias in small.names:
                    if alias.evaluated_name == "insert":
                        return alias.evaluated_alias or "insert", False
    for name in ("insert", f"{'pg' if dialect == 'postgresql' else dialect}_insert"):
        if name not in taken:
            return name, True
    return None


def _rewrite(src: FileSource, outer: Located, guard: cst.If, bound_at: Optional[int], found: Lookup,
             session: str, model: str, args: list[cst.Arg], dialect: str) -> Optional[Fix]:
    named = _insert_name(src.module, dialect)
    if named is None:
        return no_fix("no mechanical fix: the names insert and its dialect alias are taken")
    insert, needs_import = named
    keys = [k for k, _v in found.keys]
    values = ", ".join(f"{a.keyword.value}={src.code(a.value)}" for a in args)   # type: ignore[union-attr]
    index = ", ".join(f'"{k}"' for k in keys)
    line = f"{session}.execute({insert}({model}).values({values}).on_conflict_do_nothing(index_elements=[{index}]))\n"
    new = cst.parse_statement(line, config=src.module.config_for_parsing)
    add_stmt = guard.body.body[0]
    assert isinstance(new, cst.SimpleStatementLine) and isinstance(add_stmt, cst.SimpleStatementLine)
    body = list(outer.block.body)
    at = body.index(guard)
    carried: list = []
    if bound_at is not None:            # the lookup's statement goes: its comments stay
        carried = [*body[bound_at].leading_lines, *_comments(body[bound_at])]
        del body[bound_at]
        at -= 1
        if bound_at < at:
            body[bound_at] = body[bound_at].with_changes(leading_lines=[*carried, *body[bound_at].leading_lines])
            carried = []
    kept = [*carried, *guard.leading_lines, *_header_comment(guard), *add_stmt.leading_lines]
    body[at] = new.with_changes(leading_lines=kept, trailing_whitespace=add_stmt.trailing_whitespace)
    tree = src.module.deep_replace(outer.block, outer.block.with_changes(body=body))
    if needs_import:
        module = f"sqlalchemy.dialects.{dialect}"
        tree = with_import(tree, module, "insert", "" if insert == "insert" else insert)
    cols = ", ".join(f'"{k}"' for k in keys)
    name = "_".join(["uq", model.lower(), *keys])
    note = (f"on_conflict_do_nothing() needs a unique constraint on ({', '.join(keys)}), or the "
            f"database refuses the statement: add UniqueConstraint({cols}, name=\"{name}\") to "
            f"{model}.__table_args__ (or unique=True on the column) and its migration (not written for you)")
    return Fix(f"one `INSERT ... ON CONFLICT DO NOTHING` ({dialect}) instead of a lookup then "
               f"`{session}.add({model}(...))` (the row is inserted at once, not at the next flush)",
               Applicability.UNSAFE, line_edits(src.text, tree.code), note)


def _comments(stmt: cst.CSTNode) -> list:
    """A statement's trailing comment, as a line of its own."""
    trailing = getattr(stmt, "trailing_whitespace", None)
    if trailing is not None and trailing.comment is not None:
        return [cst.EmptyLine(comment=trailing.comment)]
    return []


def _header_comment(guard: cst.If) -> list:
    header = guard.body.header if isinstance(guard.body, cst.IndentedBlock) else None
    if header is not None and header.comment is not None:
        return [cst.EmptyLine(comment=header.comment)]
    return []
