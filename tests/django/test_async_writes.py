"""The same judgements through Django's async ORM (``aget``, ``asave``, ``aexists``, ``acreate``):
expressions and blind writes silent, their twins reported, check-then-act with both sites."""
from __future__ import annotations

import asyncio
import os

from django.db.models import F

import txnsafety
from fixtures.django_app.models import Account

HERE = os.path.abspath(__file__)


def _in_a_request(coro_fn):
    async def go():
        with txnsafety.request_scope("POST /async/"):
            await coro_fn()
    asyncio.run(go())


def test_async_f_expression_and_blind_write_are_silent_the_derived_twin_is_not(db, txnsafety_violations):
    async def safe():
        account = await Account.objects.using(db).aget(pk=1)
        account.balance = F("balance") + 1
        await account.asave(update_fields=["balance"])
        account = await Account.objects.using(db).aget(pk=1)
        account.note = "from a form"
        await account.asave(update_fields=["note"])

    _in_a_request(safe)
    assert txnsafety_violations == []

    async def racy():
        account = await Account.objects.using(db).aget(pk=1)
        account.balance += 1
        await account.asave(update_fields=["balance"])

    _in_a_request(racy)
    assert txnsafety_violations.codes() == ["TXN102"]
    assert Account.objects.using(db).get(pk=1).balance == 102


def test_async_check_then_act_is_reported_at_both_awaits(db, txnsafety_violations):
    async def racy():
        if not await Account.objects.using(db).filter(owner="zed").aexists():
            await Account.objects.using(db).acreate(pk=50, owner="zed")

    _in_a_request(racy)
    (violation,) = txnsafety_violations
    assert violation.code.value == "TXN105"
    assert violation.read_site.file == HERE and violation.write_site.file == HERE
    assert violation.read_site.line < violation.write_site.line

    async def safe():
        await Account.objects.using(db).aget_or_create(owner="amy", defaults={"pk": 51})

    _in_a_request(safe)
    assert len(txnsafety_violations) == 1
