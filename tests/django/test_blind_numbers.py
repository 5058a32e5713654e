"""A number or a date written blind is not reported; one computed from the read is (SQLite and PostgreSQL).

Found on django-oscar's own suite: a dashboard reorder view writes each row's position
from the request (``obj.display_order = order.index(...)``, then ``bulk_update``), and
the product-attribute form sets an integer from the form through ``setattr`` — values
the read had no part in.  The values cannot tell them from ``n += 1``; the code that
assigns the attribute can (:mod:`txnsafety.provenance`).  ``shelf_rank`` and
``opened`` are only ever assigned blind in this process; ``shelf_hits`` is computed
from itself (here, and in the model's own ``bump()``).
"""
from __future__ import annotations

import datetime as dt
import os

import pytest
from django.db import connections, models

import txnsafety

HERE = os.path.abspath(__file__)


@txnsafety.written_in_transaction()
class Shelf(models.Model):
    shelf_hits = models.IntegerField(default=0)
    shelf_rank = models.IntegerField(default=0)
    opened = models.DateField(null=True)
    shelf_label = models.CharField(max_length=40, default="")
    shelf_note = models.CharField(max_length=40, default="")

    class Meta:
        app_label = "django_app"
        db_table = "txn_provenance_shelf"

    def bump(self):
        self.shelf_hits = self.shelf_hits + 1            # derived, in a call that returns before the save


@pytest.fixture
def alias(db):
    """``db`` with three shelves."""
    conn = connections[db]
    with txnsafety.suppress(reason="test data setup"):
        with conn.schema_editor() as editor:
            if Shelf._meta.db_table in conn.introspection.table_names():
                editor.delete_model(Shelf)
            editor.create_model(Shelf)
        Shelf.objects.using(db).all().delete()
        for pk in (1, 2, 3):
            Shelf.objects.using(db).create(pk=pk, shelf_hits=10, shelf_rank=pk, opened=dt.date(2020, 1, pk),
                                           shelf_label=f"shelf {pk}", shelf_note=f" note {pk} ")
    conn.close()
    return db


def _reorder(alias, order):
    """django-oscar's RangeReorderView: each row's new position is its index in the request's list."""
    shelves = list(Shelf.objects.using(alias).filter(pk__in=order))
    for shelf in shelves:
        shelf.shelf_rank = order.index(shelf.pk)
    Shelf.objects.using(alias).bulk_update(shelves, ["shelf_rank"])


def _from_form(alias, cleaned):
    """A form's values set through setattr (django-oscar's attribute container does so)."""
    shelf = Shelf.objects.using(alias).get(pk=1)
    for name, value in cleaned.items():
        setattr(shelf, name, value)
    shelf.save(update_fields=list(cleaned))


def test_a_number_or_a_date_written_blind_is_not_reported(alias, txnsafety_violations):
    _reorder(alias, [3, 1, 2])
    _from_form(alias, {"shelf_rank": 7, "opened": dt.date(2021, 6, 1)})
    assert txnsafety_violations == []
    assert [s.shelf_rank for s in Shelf.objects.using(alias).order_by("pk")] == [7, 2, 0]


def test_a_counter_computed_from_the_read_is_reported(alias, txnsafety_violations):
    shelf = Shelf.objects.using(alias).get(pk=1)
    shelf.shelf_hits += 1                                 # the racy twin: derived from the read
    shelf.save(update_fields=["shelf_hits"])
    shelf = Shelf.objects.using(alias).get(pk=2)
    shelf.bump()                                          # derived in the model's method
    shelf.save(update_fields=["shelf_hits"])
    shelves = list(Shelf.objects.using(alias).filter(pk=3))
    for shelf in shelves:
        hits = shelf.shelf_hits                           # derived through a local
        shelf.shelf_hits = hits + 1
    Shelf.objects.using(alias).bulk_update(shelves, ["shelf_hits"])
    assert txnsafety_violations.codes() == ["TXN102"] * 3
    assert {v.detail["fields written"] for v in txnsafety_violations} == {"shelf_hits"}


def test_a_blind_column_does_not_excuse_a_derived_one(alias, txnsafety_violations):
    shelf = Shelf.objects.using(alias).get(pk=1)
    shelf.shelf_rank = 5
    shelf.shelf_hits += 1
    shelf.save(update_fields=["shelf_rank", "shelf_hits"])
    assert txnsafety_violations.codes() == ["TXN102"]


def test_an_untouched_number_written_beside_a_changed_column_is_a_stale_copy(alias, txnsafety_violations):
    shelf = Shelf.objects.using(alias).get(pk=1)
    shelf.opened = dt.date(2022, 2, 2)                    # set blind
    shelf.save(update_fields=["opened", "shelf_rank"])    # shelf_rank untouched: its loaded value written back
    assert txnsafety_violations.codes() == ["TXN102"]
    assert txnsafety_violations[0].detail["fields written"] == "opened, shelf_rank"
    shelf = Shelf.objects.using(alias).get(pk=2)
    shelf.save(update_fields=["shelf_rank"])              # saved alone, untouched: a stale copy too
    assert txnsafety_violations.codes() == ["TXN102", "TXN102"]


def test_text_assigned_the_value_it_had_is_blind_but_text_left_untouched_is_a_stale_copy(
        alias, txnsafety_violations):
    """django-oscar's attribute form re-saves the text it showed beside a changed column."""
    shelf = Shelf.objects.using(alias).get(pk=1)
    shelf.shelf_label = "".join(["shelf ", "1"])          # the form's text: equal, not the object loaded
    shelf.opened = dt.date(2022, 2, 2)
    shelf.save(update_fields=["shelf_label", "opened"])
    assert txnsafety_violations == []
    shelf = Shelf.objects.using(alias).get(pk=2)
    shelf.opened = dt.date(2022, 2, 2)
    shelf.save(update_fields=["shelf_label", "opened"])   # shelf_label untouched: written back stale
    assert txnsafety_violations.codes() == ["TXN102"]
    shelf = Shelf.objects.using(alias).get(pk=3)
    shelf.shelf_note = (shelf.shelf_note + "!")[:-1]      # computed from the read: equal, a new object
    shelf.opened = dt.date(2022, 2, 2)
    shelf.save(update_fields=["shelf_note", "opened"])
    assert txnsafety_violations.codes() == ["TXN102", "TXN102"]
