"""txnsafety.versioned_writes judges TXN110 for ``@versioned`` models from the facts an
integration hands it (the Django integration's are the model, key, field, transaction and
whether its own save is conditional): a plain write of a row read earlier is reported with
the read and write sites; the same facts with a conditional save, or a write in the locking
transaction of the read, or of a row never read, are not."""
from __future__ import annotations

import os

from django.db import transaction

import txnsafety
from fixtures.django_app.models import Doc
from txnsafety import versioned_writes
from txnsafety.django.transactions import transaction_for

HERE = os.path.abspath(__file__)


def _facts(doc, using, conditional=False):
    return versioned_writes.UnversionedWrite(Doc, doc.pk, "version", transaction_for(using), conditional,
                                             remedy="versioned_save()")


def test_a_plain_write_of_a_row_read_earlier_is_reported_with_both_sites(db, txnsafety_violations):
    with txnsafety.request_scope("POST /doc/"):
        doc = Doc.objects.using(db).get(pk=1)
        versioned_writes.judge(doc, _facts(doc, db))
    (violation,) = txnsafety_violations
    assert violation.code.value == "TXN110" and violation.model == "django_app.Doc"
    assert "@versioned('version')" in violation.message and "use versioned_save()" in violation.message
    assert violation.read_site.file == HERE and violation.write_site.file == HERE
    assert violation.read_site.line < violation.write_site.line


def test_a_conditional_save_a_locking_transaction_or_no_read_is_not(db, txnsafety_violations):
    with txnsafety.request_scope("POST /doc/"):
        doc = Doc.objects.using(db).get(pk=1)
        versioned_writes.judge(doc, _facts(doc, db, conditional=True))     # django-concurrency's save
        with transaction.atomic(using=db):
            locked = Doc.objects.using(db).select_for_update().get(pk=1)
            versioned_writes.judge(locked, _facts(locked, db))
        versioned_writes.judge(Doc(pk=2, title="new"), _facts(Doc(pk=2), db))  # never read here
    assert txnsafety_violations == []
