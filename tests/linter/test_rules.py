"""Rule unit tests: messages, write semantics and the dataflow corners."""
from __future__ import annotations

import textwrap

import pytest

from txnsafety_lint.analysis import analyze_source
from txnsafety_lint.facts.config import Config

HEAD = "from django.db import transaction\nfrom django.db.models import F\nfrom shop.models import M\n\n\n"


def run(body, **cfg):
    src = HEAD + textwrap.dedent(body)
    return analyze_source(src, Config().update(cfg) if cfg else Config())


def found(body, **cfg):
    return [(f.line - HEAD.count("\n"), f.code) for f in run(body, **cfg)]


FIXES = {
    "TXN101": ["move the read inside", "select_for_update()"],
    "TXN102": ["transaction.atomic()", "select_for_update()", "update_fields"],
    "TXN104": ["same transaction or lock"],
    "TXN105": ["get_or_create()", "IntegrityError"],
    "TXN106": ["F('n')"],
    "TXN108": ["transaction.atomic()"],
}


@pytest.mark.parametrize("code, body", [
    ("TXN101", """
        def f(pk):
            m = M.objects.get(pk=pk)
            with transaction.atomic():
                m.x = 1
                m.save()
        """),
    ("TXN102", """
        def f(pk):
            m = M.objects.get(pk=pk)
            m.x = 1
            m.save()
        """),
    ("TXN104", """
        def f(pk):
            with transaction.atomic():
                m = M.objects.select_for_update().get(pk=pk)
            m.x = 1
            m.save()
        """),
    ("TXN105", """
        def f(name):
            if not M.objects.filter(name=name).exists():
                M.objects.create(name=name)
        """),
    ("TXN106", """
        def f(pk):
            m = M.objects.get(pk=pk)
            m.n += 1
            m.save()
        """),
    ("TXN108", """
        def f(pk):
            return M.objects.select_for_update().get(pk=pk)
        """),
])
def test_message_names_lines_and_fix(code, body):
    (finding,) = run(body)
    assert finding.code == code
    assert finding.message.startswith(f"{code} ")
    for needle in FIXES[code]:
        assert needle in finding.message, finding.message
    assert f"line {finding.line}" in finding.message
    if code not in ("TXN105", "TXN108"):
        assert "read at line" in finding.message


def test_whole_row_vs_update_fields():
    assert found("""
        def f(pk, v):
            m = M.objects.get(pk=pk)
            m.a = v
            m.save(update_fields=["a"])
            m.b = m.b * 2
            m.save(update_fields=["a"])
        """) == []
    assert found("""
        def f(pk, v):
            m = M.objects.get(pk=pk)
            m.b = m.b * 2
            m.save(update_fields=["b"])
        """) == [(5, "TXN102")]


def test_f_expression_is_atomic():
    assert found("""
        def f(pk):
            m = M.objects.get(pk=pk)
            m.n = F("n") + 1
            m.save()
        """) == []


def test_derived_through_a_local_variable():
    assert found("""
        def f(pk, amount):
            m = M.objects.get(pk=pk)
            new = m.balance - amount
            m.balance = new
            m.save(update_fields=["balance"])
        """) == [(6, "TXN102")]


def test_alias_and_refresh_from_db():
    assert found("""
        def f(pk):
            m = M.objects.get(pk=pk)
            alias = m
            with transaction.atomic():
                alias.n += 1
                alias.save()
        """) == [(7, "TXN101")]
    assert found("""
        def f(pk):
            m = M.objects.get(pk=pk)
            with transaction.atomic():
                m.refresh_from_db()
                m.n = m.n * 2
                m.save()
        """, enable="TXN109") == [(7, "TXN109")]


def test_closure_sees_outer_read():
    assert found("""
        def f(pk):
            m = M.objects.get(pk=pk)

            @transaction.atomic
            def inner():
                m.x = 1
                m.save()
            inner()
        """) == [(8, "TXN101")]


def test_nested_function_inside_lock_keeps_the_lock():
    assert found("""
        from txnsafety.locks import user_write_lock

        def f(pk):
            with user_write_lock(pk):
                m = M.objects.get(pk=pk)

                def inner():
                    m.x = 1
                    m.save()
                inner()
        """) == []


def test_unevaluated_select_for_update_is_not_a_lock():
    assert found("""
        def f(pk):
            with transaction.atomic():
                M.objects.select_for_update().filter(pk=pk)
                m = M.objects.get(pk=pk)
                m.n += 1
                m.save()
        """) == [(7, "TXN106")]


def test_parent_row_lock_makes_check_safe():
    assert found("""
        from shop.models import Parent

        def f(pk):
            with transaction.atomic():
                Parent.objects.select_for_update().get(pk=pk)
                if M.objects.filter(parent=pk).count() < 3:
                    M.objects.create(parent_id=pk)
        """) == []


def test_check_in_a_variable():
    assert found("""
        def f(key):
            taken = M.objects.filter(key=key).exists()
            if not taken:
                M.objects.create(key=key)
        """) == [(5, "TXN105")]


def test_disable_code():
    assert found("""
        def f(pk):
            m = M.objects.get(pk=pk)
            m.n += 1
            m.save()
        """, disable="TXN106") == []


def test_helper_writing_param_called_without_protection():
    assert found("""
        def _bump(m):
            m.n += 1
            m.save()

        def view(pk):
            m = M.objects.get(pk=pk)
            _bump(m)
        """) == [(8, "TXN106")]


def test_method_on_entity_that_writes_self():
    src = HEAD + textwrap.dedent("""
        class Counter:
            def bump(self):
                self.n += 1
                self.save()


        def view(pk):
            c = M.objects.get(pk=pk)
            c.bump()
        """)
    assert [(f.code) for f in analyze_source(src)] == ["TXN106"]


def test_syntax_error_raises_syntaxerror_not_crash():
    with pytest.raises(SyntaxError):
        analyze_source("from django.db import transaction\ndef f(:\n  M.objects.get().save()\n")


def test_async_sqlalchemy():
    src = textwrap.dedent("""\
        from sqlalchemy.ext.asyncio import AsyncSession
        from app.models import Post


        async def like(session: AsyncSession, pid):
            post = await session.get(Post, pid)
            post.likes += 1
            await session.commit()


        async def like_safely(session: AsyncSession, pid):
            async with session.begin():
                post = await session.get(Post, pid, with_for_update=True)
                post.likes += 1
        """)
    assert [(f.line, f.code) for f in analyze_source(src)] == [(8, "TXN106")]
