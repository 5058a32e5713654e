"""A read-modify-write with no protection (TXN101, 102, 106) held under the lock service's
user write lock, keyed by the row's model and primary key::

    with user_write_lock(f"profile:{pk}"):
        profile = Profile.objects.get(pk=pk)
        profile.prefs = {**profile.prefs, key: value}
        profile.save()

For what the counters fix cannot make atomic (a JSON or dict field, a value derived in
Python) and the locked read does not reach (a read on a named database, around a ``try``
that catches, a Flask-SQLAlchemy ``Model.query.get()``); taken first in a module that
already uses ``user_write_lock`` (its project runs the lock service).

Always **unsafe**: it needs the lock service configured in every process that writes the
row (``txnsafety.locks.configure(url=...)`` / ``TXNSAFETY_LOCK_URL``; the default
``memory://`` locks within one process only), and every other writer of the row must take
the same lock; the note says so.  The read must be by primary key (Django ``get(pk=...)`` /
``get(id=...)``, ``get_object_or_404(M, pk=...)``; SQLAlchemy ``session.get(M, key)``,
``session.query(M).get(key)``, ``M.query.get(key)``) of a key that is a name, an attribute
or a number, so the lock id is known before the read.  The read and the statement that
writes (or holds the write) must lie in one block of the function, and the write must
commit inside the wrap: a Django read inside ``transaction.atomic()`` or a SQLAlchemy one
inside ``session.begin()`` would release the lock before the commit, and is declined, as
are ``async`` functions and generators.  A model whose policy names its lock
(``@written_with_user_lock(fn)``) gets exactly that lock (:mod:`.policy_lock`), read by the
attribute ``fn`` reads, or no fix; one protected by a transaction only gets none."""
from __future__ import annotations

import dataclasses
import re
from typing import Optional

import libcst as cst

from ..facts.model import Finding
from .edits import line_edits
from .imports import binding, with_import
from .lock_scope import suspends
from .locked_read import in_atomic, read_of
from .model import Applicability, Fix
from .policy_lock import policy_lock_id
from .shapes import django_manager_root
from .source import FileSource, Located

LOCKS = "txnsafety.locks"
_POLICY = re.compile(r"declared @(written_with_user_lock|written_in_transaction)\b")


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def _plain_key(node: cst.BaseExpression) -> bool:
    """A key that names a value (evaluated twice now: for the lock id and for the read)."""
    if isinstance(node, (cst.Name, cst.Integer)):
        return not node.lpar
    return isinstance(node, cst.Attribute) and _plain_key(node.value)


@dataclasses.dataclass(frozen=True)
class RowRead:
    """A read of one row: ``model``, the ``key`` it is looked up by, ``framework``, and
    ``field``: the Django lookup's keyword (``pk``, ``id``, ``user_id``), None for a
    SQLAlchemy read by primary key."""

    model: str
    key: cst.BaseExpression
    framework: str
    field: Optional[str] = None


def row_read(value: cst.BaseExpression) -> Optional[RowRead]:
    """The one row ``value`` reads by one exact lookup (Django) or by primary key (SQLAlchemy)."""
    if not isinstance(value, cst.Call):
        return None
    args = list(value.args)
    positional = [a.value for a in args if a.keyword is None and not a.star]
    func = value.func
    name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
    if name == "get" and isinstance(func, cst.Attribute) and len(args) == 1 and args[0].keyword is not None \
            and "__" not in args[0].keyword.value:
        root = django_manager_root(value)
        if root is not None:
            return RowRead(root[0], args[0].value, "django", args[0].keyword.value)
    first = positional[0] if positional else None
    if name == "get_object_or_404" and len(args) == 2 and isinstance(first, cst.Name) \
            and args[1].keyword is not None and "__" not in args[1].keyword.value:
        return RowRead(first.value, args[1].value, "django", args[1].keyword.value)
    if any(a.keyword or a.star for a in args):
        return None
    if name == "get" and len(positional) == 2 and isinstance(positional[0], cst.Name):
        return RowRead(positional[0].value, positional[1], "sqlalchemy")             # session.get(M, key)
    if name in ("get", "get_or_404") and len(positional) == 1 and isinstance(func, cst.Attribute):
        receiver = func.value
        if isinstance(receiver, cst.Attribute) and receiver.attr.value == "query" \
                and isinstance(receiver.value, cst.Name):
            return RowRead(receiver.value.value, positional[0], "sqlalchemy")        # M.query.get(key)
        if isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Attribute) \
                and receiver.func.attr.value == "query" and len(receiver.args) == 1 \
                and isinstance(receiver.args[0].value, cst.Name) and name == "get":
            return RowRead(receiver.args[0].value.value, positional[0], "sqlalchemy")   # query(M).get(key)
    return None


def lock_id(model: str, key: cst.BaseExpression) -> str:
    """The lock id's code: ``f"profile:{pk}"`` (the project's fixtures spell them so)."""
    if isinstance(key, cst.Integer):
        return f'"{model.lower()}:{key.value}"'
    return f'f"{model.lower()}:{{{_code(key)}}}"'


def _last_index(src: FileSource, read: Located, write: Located) -> Optional[int]:
    """The index in the read's block of the statement that is or holds the write."""
    if write.block is read.block:
        return write.index if write.index > read.index else None
    first, last = src.line_of(write.statement), src.end_line_of(write.statement)
    body = read.block.body
    return next((i for i in range(read.index + 1, len(body))
                 if src.line_of(body[i]) <= first and last <= src.end_line_of(body[i])), None)


def _begins(src: FileSource, function: cst.FunctionDef, line: int) -> bool:
    """Whether a ``with ....begin()`` of ``function`` holds ``line`` (the session commits at
    its end, after the lock around the line would be gone)."""
    hit = []

    class _Withs(cst.CSTVisitor):
        def visit_With(self, node: cst.With) -> None:
            if any(".begin(" in src.code(item) for item in node.items) \
                    and src.line_of(node) < line <= src.end_line_of(node):
                hit.append(node)
    function.body.visit(_Withs())
    return bool(hit)


def _commits(src: FileSource, wrapped: list) -> bool:
    """Whether the wrapped statements commit: a ``.commit()`` call or a ``with ....begin()``."""
    text = "".join(src.code(s) for s in wrapped)
    return ".commit()" in text or any(isinstance(s, cst.With) and any(".begin(" in src.code(i) for i in s.items)
                                      for s in wrapped)


#: session methods a row may be handed to inside the wrap (they write it on this connection)
_SESSION_METHODS = {"add", "merge", "refresh", "expunge", "flush"}


def handed_on(obj: str, nodes: list) -> bool:
    """Whether ``nodes`` hand the row ``obj`` itself to anything but the session (a call, a
    name, a return): code it reaches might write it from another thread or process that
    would wait for the lock held around it."""
    names: list[cst.Name] = []
    allowed: set[int] = set()

    class _Finder(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            if isinstance(node.func, cst.Attribute) and node.func.attr.value in _SESSION_METHODS:
                allowed.update(id(a.value) for a in node.args)

        def visit_Attribute(self, node: cst.Attribute) -> bool:
            self_use = isinstance(node.value, cst.Name) and node.value.value == obj
            if self_use:
                return False             # ``obj.field``: the row's own attribute
            return True

        def visit_Name(self, node: cst.Name) -> None:
            if node.value == obj:
                names.append(node)
    for node in nodes:
        node.visit(_Finder())
    return any(id(n) not in allowed for n in names)


def user_lock_fix(src: FileSource, finding: Finding) -> Optional[Fix]:
    found = read_of(src, finding)
    if found is None:
        return None
    obj, read, assign, write = found
    function = read.function
    if function is None or read.function is not write.function:
        return None
    read_row = row_read(assign.value)
    if read_row is None or not _plain_key(read_row.key):
        return None
    model, key, framework = read_row.model, read_row.key, read_row.framework
    policy = _POLICY.search(finding.message)
    if policy is not None and policy.group(1) != "written_with_user_lock":
        return None                     # a transaction is what protects it: a lock does not count
    if policy is not None:              # the policy names the lock: take exactly that one
        ident = policy_lock_id(src, model, read_row.field, key)
    else:
        ident = lock_id(model, key) if read_row.field in (None, "pk", "id") else None
    if ident is None:
        return None
    last = _last_index(src, read, write)
    if last is None:
        return None                     # the write is not in a statement of the read's block
    wrapped = list(read.block.body[read.index:last + 1])
    if function.asynchronous is not None or suspends(wrapped) or handed_on(obj, wrapped[1:]):
        return None
    line = src.line_of(read.statement)
    if framework == "django" and in_atomic(src, function, line, line):
        return None                     # the lock would be released before the commit
    if framework == "sqlalchemy" and (_begins(src, function, line) or not _commits(src, wrapped)):
        return None
    return _wrap(src, read, last, model, ident, framework, policy is not None)


def _wrap(src: FileSource, read: Located, last: int, model: str, ident: str, framework: str,
          declared: bool) -> Optional[Fix]:
    found = binding(src.module, LOCKS, "user_write_lock")
    if found is False:
        return None
    body = list(read.block.body)
    wrapped = [body[read.index].with_changes(leading_lines=[]), *body[read.index + 1:last + 1]]
    block = cst.parse_statement(f"with user_write_lock({ident}):\n    pass\n",
                                config=src.module.config_for_parsing)
    assert isinstance(block, cst.With)
    block = block.with_changes(body=block.body.with_changes(body=wrapped),
                               leading_lines=body[read.index].leading_lines)
    body[read.index:last + 1] = [block]
    tree = src.module.deep_replace(read.block, read.block.with_changes(body=body))
    if found is None:
        tree = with_import(tree, LOCKS, "user_write_lock")
    commit = "the save" if framework == "django" else "the commit"
    note = (f"user_write_lock() needs the lock service in every process that writes `{model}` "
            f"(txnsafety.locks.configure(url=...) or TXNSAFETY_LOCK_URL: the default memory:// "
            f"locks within one process only), and every other writer of `{model}` rows must take "
            f"the same lock ({ident})")
    if declared:
        note = note.replace("must take the same lock", "must take the same lock, the one its policy names")
    if framework == "django":
        note += "; under ATOMIC_REQUESTS take it before the request's transaction begins"
    return Fix(f"hold `user_write_lock({ident})` from the read of `{model}` to {commit} "
               f"(other writers of the row wait for it)", Applicability.UNSAFE,
               line_edits(src.text, tree.code), note)


def user_lock_fix_where_used(src: FileSource, finding: Finding) -> Optional[Fix]:
    """:func:`user_lock_fix`, tried before the locked read in a module that already takes
    ``user_write_lock`` (its project runs the lock service); None elsewhere."""
    if binding(src.module, LOCKS, "user_write_lock") is not True:
        return None
    fix = user_lock_fix(src, finding)
    return fix if fix is not None and fix.available else None
