"""Each runtime code on the generic data layer (minidb on real SQLite), with its safe twin."""
from __future__ import annotations

import secrets
import sys
import time
from contextlib import contextmanager

import pytest

import txnsafety
from txnsafety.context import enter_lease, exit_lease

from .conftest import Account, AuditEntry, Country, DailyStat, Doc, LegacyCounter, Points, Unchecked


class ToyLease:
    """A minimal LeaseLike: the checker's contract, not the lock service."""

    def __init__(self, key: str, seconds: float = 60.0, verified: bool = True) -> None:
        self.key, self.token, self.fence = key, secrets.token_hex(16), 1
        self.deadline = time.monotonic() + seconds
        self.released = False
        self._verified = verified

    def is_live(self) -> bool:
        return not self.released and time.monotonic() < self.deadline

    @property
    def verified(self) -> bool:
        return self._verified


@contextmanager
def toy_lock(key, **kw):
    lease = ToyLease(str(key), **kw)
    enter_lease(lease)
    try:
        yield lease
    finally:
        lease.released = True
        exit_lease(lease)


# -- TXN102 unprotected ----------------------------------------------------------

def test_txn102_read_modify_write_outside_any_transaction(store, txnsafety_violations):
    acct = store.get(Account, 1)
    acct.balance += 5
    store.put(acct)
    assert txnsafety_violations.codes() == ["TXN102"]
    v = txnsafety_violations[0]
    assert v.model.endswith("Account") and v.key == "1"
    assert v.read_site.function == "test_txn102_read_modify_write_outside_any_transaction"
    assert v.write_site.line == v.read_site.line + 2
    assert v.read_site.file == __file__


def test_txn102_safe_twin_inside_one_transaction(store, txnsafety_violations):
    with store.transaction():
        acct = store.get(Account, 1)
        acct.balance += 5
        store.put(acct)
    assert txnsafety_violations == []


# -- TXN101 half-protected ----------------------------------------------------------

def test_txn101_read_outside_written_inside(store, txnsafety_violations):
    acct = store.get(Account, 1)
    with store.transaction():
        acct.balance += 5
        store.put(acct)
    assert txnsafety_violations.codes() == ["TXN101"]


def test_txn101_user_lock_read_outside_lock(store, txnsafety_violations):
    pts = store.get(Points, 1)
    with toy_lock(7):
        pts.points += 1
        store.put(pts)
    assert txnsafety_violations.codes() == ["TXN101"]


def test_txn101_safe_twin_user_lock(store, txnsafety_violations):
    with toy_lock(7):
        pts = store.get(Points, 1)
        pts.points += 1
        store.put(pts)
    assert txnsafety_violations == []


def test_user_lock_on_the_wrong_key_does_not_protect(store, txnsafety_violations):
    with toy_lock(8):
        pts = store.get(Points, 1)
        pts.points += 1
        store.put(pts)
    assert txnsafety_violations.codes() == ["TXN102"]


# -- TXN103 internal ------------------------------------------------------------------

def _award(store, amount):
    """The seed's _internal_fn: its own get-modify-put of the same row."""
    again = store.get(Account, 1)
    again.balance += amount
    store.put(again)


def test_txn103_two_objects_same_row_both_written(store, txnsafety_violations):
    with store.transaction():
        acct = store.get(Account, 1)
        acct.balance += 10
        _award(store, 5)          # nested get-modify-put of the same row
        store.put(acct)           # erases the +5
    assert txnsafety_violations.codes() == ["TXN103"]
    v = txnsafety_violations[0]
    assert v.other_write_site.function == "_award"
    assert v.write_site.function == "test_txn103_two_objects_same_row_both_written"


def test_txn103_safe_twin_sequential_reads(store, txnsafety_violations):
    with store.transaction():
        _award(store, 5)
        acct = store.get(Account, 1)   # read after the other write: sees it
        acct.balance += 10
        store.put(acct)
    assert txnsafety_violations == []


def test_txn103_disjoint_partial_writes_are_safe(store, txnsafety_violations):
    with store.transaction():
        a = store.get(Account, 1)
        b = store.get(Account, 1)
        txnsafety.record_write(a, key=1, fields=["balance"])
        txnsafety.record_write(b, key=1, fields=["owner"])
    assert txnsafety_violations == []


def test_txn103_counts_each_field_from_when_it_was_written(store, txnsafety_violations):
    """b read after a's write of balance: a's later write of owner does not make b's
    write of balance erase anything; b's write of owner does."""
    with store.transaction():
        a = store.get(Account, 1)
        txnsafety.record_write(a, key=1, fields=["balance"])
        b = store.get(Account, 1)
        txnsafety.record_write(a, key=1, fields=["owner"])
        txnsafety.record_write(b, key=1, fields=["balance"])
        assert txnsafety_violations == []
        txnsafety.record_write(b, key=1, fields=["owner"])
    assert txnsafety_violations.codes() == ["TXN103"]


def test_txn103_still_checked_for_legacy_models(store, txnsafety_violations):
    a = store.get(LegacyCounter, 1)
    b = store.get(LegacyCounter, 1)
    store.put(a)
    store.put(b)
    assert txnsafety_violations.codes() == ["TXN103"]


def test_txn103_rows_are_told_apart_by_equal_keys_even_unhashable_ones(store, txnsafety_violations):
    """A row is its model and its key: equal keys are one row (1 and 1.0 alike), and a
    key that cannot be hashed (a data layer's list of key parts) is compared by its text."""
    with store.transaction():
        a = store.get(Account, 1)
        b = store.get(Account, 1)
        txnsafety.record_write(b, key=1.0)
        txnsafety.record_write(a, key=1)
        c = store.get(Account, 1)
        d = store.get(Account, 1)
        txnsafety.record_write(d, key=[1, "eu"])
        txnsafety.record_write(c, key=[1, "us"])   # another row: nothing erased
        txnsafety.record_write(c, key=[1, "eu"])   # d's row, read before d wrote it
    assert txnsafety_violations.codes() == ["TXN103", "TXN103"]


# -- TXN104 scope changed ----------------------------------------------------------------

def test_txn104_read_in_one_transaction_written_in_another(store, txnsafety_violations):
    with store.transaction():
        acct = store.get(Account, 1)
    with store.transaction():
        acct.balance += 1
        store.put(acct)
    assert txnsafety_violations.codes() == ["TXN104"]


def test_txn104_written_after_the_transaction_ended(store, txnsafety_violations):
    with store.transaction():
        acct = store.get(Account, 1)
    acct.balance += 1
    store.put(acct)
    assert txnsafety_violations.codes() == ["TXN104"]


def test_txn104_savepoint_is_the_same_transaction(store, txnsafety_violations):
    with store.transaction():
        acct = store.get(Account, 1)
        with store.transaction():
            acct.balance += 1
            store.put(acct)
    assert txnsafety_violations == []


def test_txn104_lock_released_and_reacquired(store, txnsafety_violations):
    with toy_lock(7):
        pts = store.get(Points, 1)
    with toy_lock(7):
        pts.points += 1
        store.put(pts)
    assert txnsafety_violations.codes() == ["TXN104"]
    assert "later acquisition" in txnsafety_violations[0].message


def test_txn104_lease_expired_before_the_write(store, txnsafety_violations):
    with toy_lock(7, seconds=0.0):
        pts = store.get(Points, 1)
        pts.points += 1
        store.put(pts)
    assert txnsafety_violations.codes() == ["TXN104"]
    assert "expired" in txnsafety_violations[0].message


def test_txn111_unverified_lease(store, txnsafety_violations):
    with toy_lock(7, verified=False):
        pts = store.get(Points, 1)
        pts.points += 1
        store.put(pts)
    assert txnsafety_violations.codes() == ["TXN111"]


# -- TXN109 weak isolation, TXN108 ----------------------------------------------------------

def test_txn109_read_committed_transaction(store, txnsafety_violations):
    with store.weak_transaction():
        acct = store.get(Account, 1)
        acct.balance += 1
        store.put(acct)
    assert txnsafety_violations.codes() == ["TXN109"]


def test_txn109_safe_twin_for_update_read(store, txnsafety_violations):
    with store.weak_transaction():
        acct = store.get(Account, 1)
        txnsafety.record_read(acct, key=1, for_update=True)  # re-read FOR UPDATE
        acct.balance += 1
        store.put(acct)
    assert txnsafety_violations == []


def test_txn108_for_update_outside_transaction(store, txnsafety_violations):
    acct = Account(1, 0)
    txnsafety.record_read(acct, key=1, for_update=True)
    assert txnsafety_violations.codes() == ["TXN108"]


# -- TXN110 policy ------------------------------------------------------------------------

def test_txn110_never_written(store, txnsafety_violations):
    c = store.get(Country, 1)
    with store.transaction():
        store.put(c)
    assert txnsafety_violations.codes() == ["TXN110"]


def test_txn110_written_once_rewrite(store, txnsafety_violations):
    store.insert(AuditEntry(2, "new"))     # creation: fine
    assert txnsafety_violations == []
    e = store.get(AuditEntry, 1)
    e.text = "changed"
    store.put(e)
    assert txnsafety_violations.codes() == ["TXN110"]


def test_txn110_single_writer(store, txnsafety_violations):
    with txnsafety.single_writer("nightly"):
        s = store.get(DailyStat, 1)
        s.total += 1
        store.put(s)
    assert txnsafety_violations == []
    s = store.get(DailyStat, 1)
    store.put(s)
    assert txnsafety_violations.codes() == ["TXN110"]


def test_versioned_model_never_reports_rmw(store, txnsafety_violations):
    d = store.get(Doc, 1)
    d.version += 1
    store.put(d)
    assert txnsafety_violations == []


def test_model_without_policy_unchecked_unless_strict(store, txnsafety_violations):
    u = store.get(Unchecked, 1)
    store.put(u)
    assert txnsafety_violations == []
    txnsafety.configure(strict=True)
    try:
        u = store.get(Unchecked, 1)
        store.put(u)
    finally:
        txnsafety.configure(strict=False)
    assert txnsafety_violations.codes() == ["TXN102"]


def test_newly_created_entity_needs_no_read_protection(store, txnsafety_violations):
    store.insert(Account(2, 0))
    assert txnsafety_violations == []


# -- reporting ----------------------------------------------------------------------------

def test_repeated_reports_from_same_sites_are_deduplicated(store, txnsafety_violations):
    for _ in range(50):
        acct = store.get(Account, 1)
        store.put(acct)
    assert txnsafety_violations.codes() == ["TXN102"]


def test_violation_never_contains_field_values(store, txnsafety_violations):
    secret = "alice@example.org"
    store.conn.execute("UPDATE account SET balance = ? WHERE id = 1", (secret,))
    acct = store.get(Account, 1)
    store.put(acct)
    (v,) = txnsafety_violations
    assert secret not in str(v) and secret not in repr(v.as_dict())


@pytest.mark.txnsafety_allow("asserts the raise itself")
def test_raise_mode_raises_at_the_write(store):
    acct = store.get(Account, 1)
    with pytest.raises(txnsafety.StompingError) as info:
        store.put(acct)
    assert info.value.violation.code is txnsafety.Code.TXN102


@pytest.mark.txnsafety_allow("exercises suppression")
def test_suppress_needs_a_reason_and_silences(store):
    with pytest.raises(ValueError):
        with txnsafety.suppress("TXN102", reason=""):
            pass
    with txnsafety.suppress("TXN102", reason="one-off data fix"):
        acct = store.get(Account, 1)
        store.put(acct)


def test_suppress_in_test_refuses_outside_tests(monkeypatch):
    from txnsafety import report
    monkeypatch.delenv("PYTEST_CURRENT_TEST")
    monkeypatch.setattr(report, "_test_mode", type("E", (), {"is_set": staticmethod(lambda: False)})())
    mail = sys.modules.get("django.core.mail")
    if mail is not None:        # Django's test environment (set up by an earlier test) says "tests run"
        monkeypatch.delattr(mail, "outbox", raising=False)
    with pytest.raises(RuntimeError):
        with txnsafety.suppress_in_test(reason="factory"):
            pass


def test_allowlist_by_model_and_code(store, txnsafety_violations):
    txnsafety.configure(allow=["Account:TXN102"])
    try:
        acct = store.get(Account, 1)
        store.put(acct)
        pts = store.get(Points, 1)
        store.put(pts)
    finally:
        txnsafety.configure(allow=[])
    assert txnsafety_violations.codes() == ["TXN102"]
    assert txnsafety_violations[0].model.endswith("Points")


@pytest.mark.txnsafety_allow("asserts the log record")
def test_log_mode_logs_structured_record(store, caplog):
    txnsafety.configure(mode="log")
    try:
        acct = store.get(Account, 1)
        store.put(acct)
    finally:
        txnsafety.configure(mode="raise")
    (record,) = [r for r in caplog.records if r.name == "txnsafety"]
    assert record.txnsafety["code"] == "TXN102" and record.txnsafety["key"] == "1"


def test_second_policy_on_a_model_is_an_error():
    with pytest.raises(TypeError, match="exactly one write policy"):
        @txnsafety.written_once()
        @txnsafety.written_in_transaction()
        class Twice:
            pass


def test_bad_configuration_is_a_clear_error():
    with pytest.raises(ValueError, match="mode must be one of"):
        txnsafety.configure(mode="loud")
    with pytest.raises(ValueError, match="not a TXN code"):
        txnsafety.configure(allow=["Account:E501"])


def test_internal_error_is_logged_not_raised(store, caplog, txnsafety_violations):
    class Exploding:
        @property
        def __class__(self):  # type() still works; policy lookup is on a broken object
            raise RuntimeError("boom")
    txnsafety.record_write(Exploding(), model=Account, key=object())  # key repr works; no crash
    txnsafety.record_read(object(), model=None)
    assert txnsafety_violations == []


def test_adaptive_read_sites_locate_reads_after_a_models_first_violation(store, txnsafety_violations):
    """Production default: no stack walk on reads until a model has stomped once."""
    from dataclasses import dataclass

    from fixtures.minidb import Entity

    @txnsafety.written_in_transaction()
    @dataclass(eq=False)
    class Fresh(Entity):
        n: int = 0

    store.create(Fresh)
    with txnsafety.suppress(reason="setup"):
        store.insert(Fresh(1, 0))
    txnsafety.configure(read_sites="adaptive")
    try:
        for _ in range(2):
            with txnsafety.request_scope("request"):
                row = store.get(Fresh, 1)
                store.put(row)
    finally:
        txnsafety.configure(read_sites="always")
    first, second = txnsafety_violations
    assert first.read_site is None and first.write_site is not None
    assert second.read_site is not None and second.read_site.function.startswith("test_adaptive")


def test_read_sites_never_and_bad_value(store, txnsafety_violations):
    txnsafety.configure(read_sites=False)
    try:
        store.put(store.get(Account, 1))
    finally:
        txnsafety.configure(read_sites=True)
    assert txnsafety_violations[0].read_site is None
    with pytest.raises(ValueError, match="read_sites must be one of"):
        txnsafety.configure(read_sites="sometimes")


def test_configuring_library_paths_reclassifies_files_already_seen(tmp_path, monkeypatch, txnsafety_violations):
    """A data layer named in library_paths after its frames were classified is skipped from then on."""
    (tmp_path / "my_layer.py").write_text(
        "import txnsafety\n"
        "def read(row):\n"
        "    txnsafety.record_read(row, key=1)\n"
        "    return row\n"
        "def write(row):\n"
        "    txnsafety.record_write(row, key=1)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import my_layer

    my_layer.write(my_layer.read(Account(1, 0)))
    assert txnsafety_violations[0].read_site.file.endswith("my_layer.py")
    txnsafety.configure(library_paths=[str(tmp_path)])
    try:
        with txnsafety.request_scope("second request"):
            my_layer.write(my_layer.read(Account(1, 0)))
    finally:
        txnsafety.configure(library_paths=[])
    assert txnsafety_violations[1].read_site.function.startswith("test_configuring_library_paths")


# -- how a written value was made (txnsafety.values) ------------------------------------------------

@pytest.mark.parametrize("new, loaded, derived", [
    (101, 100, True),                         # arithmetic on a number
    (100, 100, True),                         # the loaded value written back
    ("hello world", "hello", True),           # appended text
    ("Ann", "ann", True),                     # re-cased
    ("Bob", "Ann", False),                    # a value from a form
    (["a", "b"], ["a"], True),                # appended to a list
    ({"k": 2}, {"k": 1}, True),               # a key kept
    (["z"], ["a"], False),
    (True, False, False),                     # a flag
    (None, 5, False),
])
def test_looks_derived_follows_the_ways_a_read_modify_write_computes(new, loaded, derived):
    from txnsafety.values import looks_derived
    assert looks_derived(new, loaded) is derived


def test_dates_are_blind_when_now_and_derived_when_shifted():
    import datetime as dt

    from txnsafety.values import NOT_LOADED, looks_derived
    now = dt.datetime.now(dt.timezone.utc)
    earlier = now - dt.timedelta(days=3)
    assert not looks_derived(now, earlier)
    assert looks_derived(earlier + dt.timedelta(days=30), earlier)
    assert not looks_derived(7, 6, relation=True)          # a foreign key points elsewhere
    assert not looks_derived(7, NOT_LOADED)                 # never loaded: cannot come from the read


# -- check-then-act on the generic API (txnsafety.check_then_act) -------------------------------------

def _check_then_insert(txn_for_check, txn_for_insert, unique=()):
    from txnsafety import check_then_act
    scope = txnsafety.current_scope()
    check_then_act.note_lookup(scope, Account, {"owner": "zed"}, "exists() false", txn_for_check)
    check_then_act.note_insert(scope, Account, {"id": 9, "owner": "zed"}, unique, txn_for_insert, 9,
                               "tests.Account", lambda: (None, False))


def test_generic_check_then_act_is_txn105_unless_serializable_locked_or_unique(txnsafety_violations):
    _check_then_insert(None, None)
    assert txnsafety_violations.codes() == ["TXN105"]
    with txnsafety.transaction(isolation="read committed", prevents_lost_update=False) as txn:
        _check_then_insert(txn, txn)
    assert len(txnsafety_violations) == 1                   # deduplicated: same sites, same request
    with txnsafety.transaction(isolation="serializable") as txn:
        _check_then_insert(txn, txn)
    with toy_lock("owner:zed"):
        _check_then_insert(None, None)
    _check_then_insert(None, None, unique=[frozenset({"owner"})])
    assert len(txnsafety_violations) == 1


def test_generic_check_then_act_in_two_transactions_is_not_serialized(txnsafety_violations):
    with txnsafety.transaction(isolation="serializable") as first:
        pass
    with txnsafety.transaction(isolation="serializable") as second:
        _check_then_insert(first, second)
    assert txnsafety_violations.codes() == ["TXN105"]
