"""Pins for every non-public Django surface txnsafety.django relies on.

Each test names the attribute and the module that uses it, so a Django release
that moves it fails here first, loudly, instead of silently turning the checker
off.  (CI runs this suite under Django 4.2 LTS and the newest release.)
"""
from __future__ import annotations

import inspect

import pytest
from django.db import connection, connections, transaction
from django.db.models import Model
from django.db.models.query import ModelIterable, QuerySet, RelatedPopulator
from django.test import TestCase

from fixtures.django_app.models import Account, Restaurant
from txnsafety.django import hooks, reads


def _moved(what: str, user: str) -> str:
    return f"Django moved {what}; txnsafety/django/{user} depends on it and must be updated"


HOOKS, TXNS, READS = "hooks.py", "transactions.py", "reads.py"


def test_querysets_fill_their_result_cache_in_fetch_all_through_modeliterable(sqlite_db):
    # reads.py wraps QuerySet._fetch_all (private) to stamp a statement's rows at once, and
    # ModelIterable.__iter__ (private) to stamp rows that do not go through it (iterator()).
    source = inspect.getsource(reads._originals["QuerySet._fetch_all"])
    # reads._fetch_all does what Django's does, with the original ModelIterable.__iter__: its
    # whole body, line for line
    body = [line.strip() for line in source.splitlines()[1:] if line.strip()]
    assert body == ["if self._result_cache is None:", "self._result_cache = list(self._iterable_class(self))",
                    "if self._prefetch_related_lookups and not self._prefetch_done:",
                    "self._prefetch_related_objects()"], _moved("QuerySet._fetch_all", READS)
    assert "prefetch_related_objects(self._result_cache, " in inspect.getsource(QuerySet._prefetch_related_objects)
    assert Account.objects.all()._iterable_class is ModelIterable, _moved("QuerySet's ModelIterable", READS)
    assert ModelIterable.__iter__ is reads._model_iter, "the ModelIterable hook is not installed"
    assert QuerySet._fetch_all is reads._fetch_all, "the _fetch_all hook is not installed"
    # the only places Django builds instances from rows: each one is hooked
    for where in ("ModelIterable.__iter__", "RawModelIterable.__iter__"):
        assert ".from_db(" in inspect.getsource(reads._originals[where]), _moved(f"{where}'s call of from_db", READS)
    populate = inspect.getsource(RelatedPopulator.populate)
    assert ".from_db(" in populate and "self.local_setter(from_obj, obj)" in populate, _moved(
        "RelatedPopulator.populate / local_setter", READS)
    from django.db.models.query import RawQuerySet
    assert "self.iterator()" in inspect.getsource(RawQuerySet._fetch_all), _moved("RawQuerySet._fetch_all", READS)


def test_query_deferred_loading():
    # reads._loaded_fields reads Query.deferred_loading: (frozenset(), True) when nothing is deferred.
    assert Account.objects.all().query.deferred_loading == (frozenset(), True), _moved("Query.deferred_loading", READS)
    assert Account.objects.only("balance").query.deferred_loading == ({"balance"}, False), _moved(
        "Query.deferred_loading", READS)
    assert Account.objects.defer("note").query.deferred_loading == ({"note"}, True), _moved(
        "Query.deferred_loading", READS)


def test_query_select_for_update_flag():
    qs = Account.objects.all()
    assert qs.query.select_for_update is False, _moved("Query.select_for_update", HOOKS)
    assert qs.select_for_update().query.select_for_update is True, _moved("Query.select_for_update", HOOKS)


def test_atomic_blocks_stack_and_in_atomic_block(sqlite_db):
    # transactions.py reads connection.in_atomic_block / atomic_blocks; hooks.py wraps Atomic.__enter__.
    assert connection.in_atomic_block is False, _moved("BaseDatabaseWrapper.in_atomic_block", TXNS)
    assert connection.atomic_blocks == [], _moved("BaseDatabaseWrapper.atomic_blocks", TXNS)
    block = transaction.atomic()
    assert isinstance(block, transaction.Atomic), _moved("django.db.transaction.Atomic", HOOKS)
    assert block._from_testcase is False, _moved("Atomic._from_testcase", TXNS)
    with block:
        assert connection.in_atomic_block is True
        assert connection.atomic_blocks[-1] is block, _moved("Atomic.__enter__ pushing atomic_blocks", HOOKS)
        inner = transaction.atomic()
        with inner:
            assert connection.atomic_blocks == [block, inner]
    assert connection.atomic_blocks == []
    assert transaction.get_connection("default") is connections["default"], _moved(
        "transaction.get_connection", HOOKS)
    assert transaction.Atomic.__enter__ is hooks._atomic_enter, "the Atomic.__enter__ hook is not installed"


@pytest.mark.usefixtures("sqlite_tables")
class TestCaseAtomicsAreTagged(TestCase):
    databases = {"default"}

    def test_testcase_tags_its_atomics(self):
        assert connection.atomic_blocks, _moved("TestCase's atomic blocks", TXNS)
        assert all(b._from_testcase for b in connection.atomic_blocks), _moved(
            "TestCase's Atomic._from_testcase tagging", TXNS)


def test_queryset_db_attribute():
    # hooks._bulk_update reads QuerySet._db (the alias given to using()).
    assert Account.objects.using("pg")._db == "pg", _moved("QuerySet._db", HOOKS)
    assert Account.objects.all()._db is None, _moved("QuerySet._db", HOOKS)


def test_refresh_from_db_loads_through_a_temporary_from_db_instance(sqlite_db):
    # reads._refresh_from_db relies on: `fields` being the second positional parameter, and the
    # reload going through a queryset on a *different* instance.
    params = list(inspect.signature(reads._originals["Model.refresh_from_db"]).parameters)
    assert params[:3] == ["self", "using", "fields"], _moved("Model.refresh_from_db's signature", READS)
    account = Account.objects.get(pk=1)
    holders = []
    real = reads._Refresh

    def capture():
        holders.append(real())
        return holders[-1]

    reads._Refresh = capture
    try:
        account.refresh_from_db()
    finally:
        reads._Refresh = real
    (holder,) = holders
    assert len(holder.temps) == 1 and holder.temps[0] is not account, _moved(
        "refresh_from_db's temporary instance", HOOKS)


def test_save_goes_through_save_base_with_its_update_fields(sqlite_db):
    # hooks._save_base judges every save() (not the pre_save signal, which apps send by hand).
    assert Model.save_base is hooks._save_base, "the save hook is not installed"
    source = inspect.getsource(hooks._originals["Model.save_base"])
    assert "def save_base(" in source and "update_fields=None" in source, _moved("Model.save_base", HOOKS)
    calls = []
    original = hooks._originals["Model.save_base"]

    def spy(self, *args, **kwargs):
        calls.append(kwargs.get("update_fields"))
        return original(self, *args, **kwargs)

    hooks._originals["Model.save_base"] = spy
    try:
        import txnsafety
        with txnsafety.suppress(reason="only the call is under test"):
            Account.objects.get(pk=1).save(update_fields=["note"])
    finally:
        hooks._originals["Model.save_base"] = original
    assert [set(c) for c in calls] == [{"note"}], _moved("save()'s call of save_base", HOOKS)


def test_pre_save_is_sent_before_save_base_opens_its_own_atomic(sqlite_db):
    # hooks._save_base judges the write in the caller's transaction, before save_base sends
    # pre_save and then opens an atomic block for multi-table inheritance.
    from django.db.models.signals import pre_save
    states = []

    def receiver(sender, instance, **kwargs):
        states.append(connection.in_atomic_block)

    pre_save.connect(receiver, sender=Restaurant)
    try:
        restaurant = Restaurant.objects.get(pk=1)
        import txnsafety
        with txnsafety.suppress(reason="only the signal's timing is under test"):
            restaurant.save()
    finally:
        pre_save.disconnect(receiver, sender=Restaurant)
    assert states == [False], _moved("pre_save relative to save_base's atomic", HOOKS)


def test_model_state_and_meta_attributes(sqlite_db):
    account = Account.objects.get(pk=1)
    assert account._state.adding is False and account._state.db == "default", _moved("Model._state", HOOKS)
    assert Account._meta.concrete_model is Account, _moved("Options.concrete_model", HOOKS)
    assert Model.__dict__.get("refresh_from_db") is reads._refresh_from_db, "refresh hook not installed"
    assert QuerySet.bulk_update is hooks._bulk_update and QuerySet.bulk_update.alters_data


def test_postgresql_isolation_level_enum():
    # transactions.py normalises OPTIONS["isolation_level"] with Django's own IsolationLevel.
    from django.db.backends.postgresql.psycopg_any import IsolationLevel
    moved = _moved("psycopg_any.IsolationLevel", TXNS)
    assert IsolationLevel.REPEATABLE_READ.name == "REPEATABLE_READ", moved


def test_get_raises_does_not_exist_from_its_own_frame_with_the_queryset_in_clone(sqlite_db):
    # lookups.py catches DoesNotExist where it is made: the raising frame is QuerySet.get's,
    # its local ``clone`` the filtered queryset.
    from django.core.exceptions import ObjectDoesNotExist

    from txnsafety.django import lookups
    seen = []
    installed = ObjectDoesNotExist.__dict__.get("__init__")

    def spy(self, *args):
        frame = __import__("sys")._getframe(1)
        seen.append((frame.f_code is lookups._GET_CODE, frame.f_locals.get("clone")))
        Exception.__init__(self, *args)

    ObjectDoesNotExist.__init__ = spy
    try:
        with pytest.raises(Account.DoesNotExist):
            Account.objects.filter(owner="nobody").get(balance=3)
    finally:
        if installed is None:
            del ObjectDoesNotExist.__init__
        else:
            ObjectDoesNotExist.__init__ = installed
    ((own_frame, clone),) = seen
    assert own_frame and isinstance(clone, QuerySet), _moved("QuerySet.get's raise of DoesNotExist", "lookups.py")
    assert {c.lhs.target.attname for c in clone.query.where.children} == {"owner", "balance"}
