"""A number or a date written blind is not reported; one computed from the read is (SQLite and PostgreSQL).

SQLAlchemy flushes only the changed columns; a changed number looks the same whether
it was computed from the loaded value (``n += 1``) or set from outside (a position
from the request, a form's value).  The code that assigns the attribute tells them
apart (:mod:`txnsafety.provenance`): ``rack_rank`` and ``stocked`` are only ever
assigned blind in this process; ``rack_hits`` is computed from itself.
"""
from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import Column, Date, Integer, select

import txnsafety
from fixtures.sqla_app.engines import sync_stack
from fixtures.sqla_app.models import Base


@txnsafety.written_in_transaction()
class Rack(Base):
    __tablename__ = "txn_provenance_rack"
    id = Column(Integer, primary_key=True, autoincrement=False)
    rack_hits = Column(Integer, nullable=False, default=0)
    rack_rank = Column(Integer, nullable=False, default=0)
    stocked = Column(Date, nullable=True)

    def bump(self):
        self.rack_hits = self.rack_hits + 1              # derived, in a call that returns before the flush


@pytest.fixture
def stack(fresh_db):
    s = sync_stack(fresh_db)
    with s.plain.begin() as conn:
        Rack.__table__.create(conn, checkfirst=True)
        conn.execute(Rack.__table__.delete())
        conn.execute(Rack.__table__.insert(), [
            {"id": pk, "rack_hits": 10, "rack_rank": pk, "stocked": dt.date(2020, 1, pk)} for pk in (1, 2, 3)])
    yield s
    s.dispose()


def test_a_number_or_a_date_written_blind_is_not_reported(stack, txnsafety_violations):
    order = [3, 1, 2]                                    # positions from the request
    with stack.Auto() as session:                        # no transaction at all
        for rack in session.scalars(select(Rack).where(Rack.id.in_(order))):
            rack.rack_rank = order.index(rack.id)
        session.commit()
        rack = session.get(Rack, 1)
        for name, value in {"rack_rank": 7, "stocked": dt.date(2021, 6, 1)}.items():
            setattr(rack, name, value)                   # a form's values
        session.commit()
    assert txnsafety_violations == []


def test_a_counter_computed_from_the_read_is_reported(stack, txnsafety_violations):
    with stack.Auto() as session:
        rack = session.get(Rack, 1)
        rack.rack_hits += 1                              # the racy twin: derived from the read
        session.commit()
        rack = session.get(Rack, 2)
        rack.bump()                                      # derived in the model's method
        session.commit()
        rack = session.get(Rack, 3)
        hits = rack.rack_hits                            # derived through a local
        rack.rack_hits = hits + 1
        session.commit()
    assert txnsafety_violations.codes() == ["TXN102"] * 3
    assert {v.detail["fields written"] for v in txnsafety_violations} == {"rack_hits"}


def test_a_blind_column_does_not_excuse_a_derived_one(stack, txnsafety_violations):
    with stack.Auto() as session:
        rack = session.get(Rack, 1)
        rack.rack_rank = 5
        rack.rack_hits += 1
        session.commit()
    assert txnsafety_violations.codes() == ["TXN102"]
    assert txnsafety_violations[0].detail["fields written"] == "rack_hits, rack_rank"
