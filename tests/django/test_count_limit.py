"""TXN105 at run time on Django: a count compared with a limit, then an insert.

``if Seat.objects.filter(event=e).count() < e.capacity: Seat.objects.create(...)`` lets
two requests both count under the limit and both insert.  The pair is reported (sync
and async, SQLite and PostgreSQL), with the count's line as the check; a count only
shown or asserted is no check; the parent row locked with ``select_for_update()``
before counting, or a transaction that serializes (SQLite's), makes it silent; a
unique constraint on the seats (event, number) does not, and the report does not
offer one.  Two real concurrent requests on PostgreSQL show the event overbooked,
then the parent-row lock keeping it at its capacity.
"""
from __future__ import annotations

import asyncio
import os
import threading

import pytest
from django.db import connections, models, transaction

import txnsafety

HERE = os.path.abspath(__file__)


@txnsafety.written_in_transaction()
class Event(models.Model):
    capacity = models.IntegerField()

    class Meta:
        app_label = "django_app"
        db_table = "txn105_limit_event"


@txnsafety.written_in_transaction()
class Seat(models.Model):
    """One seat per (event, number): a unique key that cannot bound how many seats an event has."""

    event = models.ForeignKey(Event, on_delete=models.CASCADE)
    number = models.IntegerField()

    class Meta:
        app_label = "django_app"
        db_table = "txn105_limit_seat"
        constraints = [models.UniqueConstraint(fields=["event", "number"], name="txn105_one_seat_number")]


@pytest.fixture
def alias(db):
    """The alias of ``db`` with an event of capacity 2 that has one seat taken."""
    conn = connections[db]
    with txnsafety.suppress(reason="test data setup"):
        if Seat._meta.db_table not in conn.introspection.table_names():
            with conn.schema_editor() as editor:
                editor.create_model(Event)
                editor.create_model(Seat)
        Seat.objects.using(db).all().delete()
        Event.objects.using(db).all().delete()
        event = Event.objects.using(db).create(pk=1, capacity=2)
        Seat.objects.using(db).create(event=event, number=1)
    conn.close()
    return db


def _book(alias, number):
    """The racy booking: count the seats, compare with the capacity, insert."""
    event = Event.objects.using(alias).get(pk=1)
    if Seat.objects.using(alias).filter(event=event).count() < event.capacity:   # the check
        Seat.objects.using(alias).create(event=event, number=number)              # the act
        return True
    return False


def _book_through_a_local(alias, number):
    event = Event.objects.using(alias).get(pk=1)
    taken = Seat.objects.using(alias).filter(event_id=event.pk).count()
    if taken >= event.capacity:
        raise ValueError("sold out")
    Seat.objects.using(alias).create(event=event, number=number)


@pytest.mark.parametrize("book", [_book, _book_through_a_local])
def test_a_count_under_a_limit_then_an_insert_is_reported(alias, book, txnsafety_violations):
    with txnsafety.request_scope("POST /book/"):
        book(alias, 2)
    (violation,) = txnsafety_violations
    assert violation.code.value == "TXN105"
    assert violation.model == "django_app.Seat"
    assert violation.read_site.file == HERE and violation.read_site.function == book.__name__
    assert violation.read_site.line < violation.write_site.line
    assert violation.detail == {"keys": "event_id", "check": "count() under a limit"}
    assert "unique constraint cannot bound a count" in violation.message


def test_a_count_shown_or_asserted_is_no_check(alias, txnsafety_violations):
    with txnsafety.request_scope("GET /event/"):
        event = Event.objects.using(alias).get(pk=1)
        shown = f"{Seat.objects.using(alias).filter(event=event).count()} seats taken"
        assert Seat.objects.using(alias).filter(event=event).count() == 1
        Seat.objects.using(alias).create(event=event, number=2)
    assert shown == "1 seats taken" and txnsafety_violations == []


def test_async_count_under_a_limit_is_reported(alias, txnsafety_violations):
    async def book():
        event = await Event.objects.using(alias).aget(pk=1)
        if await Seat.objects.using(alias).filter(event=event).acount() < event.capacity:
            await Seat.objects.using(alias).acreate(event=event, number=2)

    async def main():
        with txnsafety.request_scope("POST /book/"):
            await book()

    asyncio.run(main())
    (violation,) = txnsafety_violations
    assert violation.code.value == "TXN105" and violation.detail["check"] == "count() under a limit"
    assert violation.read_site.file == HERE and violation.read_site.function == "book"


def test_the_parent_row_locked_before_the_count_makes_it_atomic(alias, txnsafety_violations):
    """PostgreSQL: the lock serializes the bookings; SQLite: its transaction does."""
    with txnsafety.request_scope("POST /book/"), transaction.atomic(using=alias):
        event = Event.objects.using(alias).select_for_update().get(pk=1)
        if Seat.objects.using(alias).filter(event=event).count() < event.capacity:
            Seat.objects.using(alias).create(event=event, number=2)
    assert txnsafety_violations == []
    assert Seat.objects.using(alias).count() == 2


# -- two real requests at once, on PostgreSQL ----------------------------------------------------

def _waiting_for_a_lock(monitor, pid: int) -> bool:
    """Whether backend ``pid`` waits for a lock (asked on a connection of its own, in autocommit:
    a transaction would see one snapshot of pg_stat_activity)."""
    row = monitor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
    return row is not None and row[0] == "Lock"


def test_two_requests_both_count_under_the_limit_and_overbook(alias, txnsafety_violations):
    if alias != "pg":
        pytest.skip("SQLite runs one writer at a time; PostgreSQL shows two requests at once")
    barrier = threading.Barrier(2)

    def request(number: int) -> None:
        with txnsafety.request_scope("POST /book/"):
            try:
                event = Event.objects.using(alias).get(pk=1)
                under = Seat.objects.using(alias).filter(event=event).count() < event.capacity
                barrier.wait()                                  # both have counted 1 of 2
                if under:
                    Seat.objects.using(alias).create(event=event, number=number)
            finally:
                connections[alias].close()

    threads = [threading.Thread(target=request, args=(n,)) for n in (2, 3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert Seat.objects.using(alias).count() == 3               # capacity 2: overbooked
    assert txnsafety_violations.codes() == ["TXN105", "TXN105"]


def test_the_parent_row_lock_keeps_two_requests_to_the_capacity(alias, postgres_url, txnsafety_violations):
    if alias != "pg":
        pytest.skip("SQLite runs one writer at a time; PostgreSQL shows two requests at once")
    import psycopg
    monitor = psycopg.connect(postgres_url, autocommit=True)
    counted, pid_known = threading.Event(), threading.Event()
    pids: dict[str, int] = {}
    booked: dict[int, bool] = {}

    def book(number: int) -> None:
        with transaction.atomic(using=alias):
            event = Event.objects.using(alias).select_for_update().get(pk=1)
            under = Seat.objects.using(alias).filter(event=event).count() < event.capacity
            if number == 2:
                counted.set()
                # the other request is at the lock: without it, it would count 1 of 2 too
                while not _waiting_for_a_lock(monitor, pids["second"]):
                    pass
            if under:
                Seat.objects.using(alias).create(event=event, number=number)
            booked[number] = under

    def request(number: int) -> None:
        with txnsafety.request_scope("POST /book/"):
            try:
                if number == 3:
                    pids["second"] = connections[alias].cursor().connection.info.backend_pid
                    pid_known.set()
                    counted.wait()
                book(number)
            finally:
                connections[alias].close()

    second = threading.Thread(target=request, args=(3,))
    second.start()
    pid_known.wait()
    first = threading.Thread(target=request, args=(2,))
    first.start()
    first.join()
    second.join()
    monitor.close()
    assert booked == {2: True, 3: False}
    assert Seat.objects.using(alias).count() == 2
    assert txnsafety_violations == []
