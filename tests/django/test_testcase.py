"""Under django.test.TestCase the test's own atomic blocks must not count as protection.

TestCase wraps each test in atomic blocks (tagged ``_from_testcase``).  Without
discounting them every read-modify-write in a test would look "inside a
transaction" — and a ``select_for_update()`` outside ``atomic()`` would not even
raise as it does in production.  The checker sees what production would.
"""
from __future__ import annotations

import pytest
from django.db import transaction
from django.test import TestCase

import txnsafety
from fixtures.django_app.models import Account
from txnsafety.django.transactions import transaction_for


@pytest.mark.usefixtures("sqlite_tables")
class SQLiteTestCaseTests(TestCase):
    databases = {"default"}

    @classmethod
    def setUpTestData(cls):
        Account.objects.create(pk=50, balance=10)

    def test_testcase_atomics_are_not_a_transaction(self):
        from django.db import connection
        self.assertTrue(connection.in_atomic_block)
        self.assertIsNone(transaction_for("default"))
        with transaction.atomic():
            self.assertIsNotNone(transaction_for("default"))

    @pytest.mark.txnsafety_allow("asserts the raise")
    def test_plain_read_modify_write_in_a_test_is_unprotected(self):
        account = Account.objects.get(pk=50)
        account.balance += 1
        with self.assertRaises(txnsafety.StompingError) as info:
            account.save()
        self.assertEqual(info.exception.violation.code, "TXN102")

    def test_read_modify_write_inside_the_tests_own_atomic_is_fine(self):
        with transaction.atomic():
            account = Account.objects.select_for_update().get(pk=50)
            account.balance += 1
            account.save()
        self.assertEqual(Account.objects.get(pk=50).balance, 11)

    @pytest.mark.txnsafety_allow("asserts the raise")
    def test_view_through_the_test_client(self):
        with self.assertRaises(txnsafety.StompingError) as info:
            self.client.get("/default/account/half_protected/50/")
        self.assertEqual(info.exception.violation.code, "TXN101")
        response = self.client.get("/default/account/half_protected_safe/50/")
        self.assertEqual(response.status_code, 200)


@pytest.mark.usefixtures("pg_tables")
class PostgreSQLTestCaseTests(TestCase):
    databases = {"pg"}

    @classmethod
    def setUpTestData(cls):
        Account.objects.using("pg").create(pk=50, balance=10)

    @pytest.mark.txnsafety_allow("asserts the raise")
    def test_select_for_update_outside_atomic_is_txn108_even_though_django_is_silent(self):
        # In production Django raises TransactionManagementError here; inside TestCase it does not.
        with self.assertRaises(txnsafety.StompingError) as info:
            Account.objects.using("pg").select_for_update().get(pk=50)
        self.assertEqual(info.exception.violation.code, "TXN108")

    @pytest.mark.txnsafety_allow("collects and asserts the violation")
    def test_weak_isolation_is_still_visible_inside_testcase(self):
        from txnsafety.pytest_plugin import ViolationLog
        seen = ViolationLog()
        txnsafety.add_listener(seen.add)
        previous = txnsafety.settings.mode
        txnsafety.settings.mode = "collect"
        try:
            with transaction.atomic(using="pg"):
                account = Account.objects.using("pg").get(pk=50)
                account.balance += 1
                account.save()
        finally:
            txnsafety.settings.mode = previous
            txnsafety.remove_listener(seen.add)
        self.assertEqual(seen.codes(), ["TXN109"])
