"""TXN105 at run time with single-table inheritance: the check's class is the one the query names.

Several classes share one table; a legacy ``Query.count()`` counts over a subquery, so the
checker finds the class from the query (its entity), not from the table (which several
classes map: the registry's order of them changes from run to run).  A check that names no
class (``exists()`` on a column) is a check of the table's base class, and a row of any of its
subclasses is a row of it.
"""
from __future__ import annotations

import pytest
from sqlalchemy import Column, Integer, String, exists, func, select

import txnsafety
from fixtures.sqla_app.engines import sync_stack
from fixtures.sqla_app.models import Base
from txnsafety.sqlalchemy import lookups


@txnsafety.written_in_transaction()
class Staff(Base):
    __tablename__ = "txn105_staff"
    id = Column(Integer, primary_key=True, autoincrement=False)
    kind = Column(String(20), nullable=False)
    name = Column(String(50), nullable=False)
    __mapper_args__ = {"polymorphic_on": kind, "polymorphic_identity": "staff"}


class Engineer(Staff):
    __mapper_args__ = {"polymorphic_identity": "engineer"}


class Manager(Staff):
    __mapper_args__ = {"polymorphic_identity": "manager"}


class Intern(Staff):
    __mapper_args__ = {"polymorphic_identity": "intern"}


CLASSES = [Staff, Engineer, Manager, Intern]


@pytest.fixture
def stack(fresh_db):
    s = sync_stack(fresh_db)
    with s.plain.begin() as conn:
        Staff.__table__.create(conn, checkfirst=True)
        conn.execute(Staff.__table__.delete())
    yield s
    s.dispose()


def _hire(session, counted, hired, name):
    if session.query(counted).filter(counted.name == name).count() == 0:      # the check
        session.add(hired(id=1, name=name))                                      # the act
        session.commit()


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_query_count_checks_the_class_it_names(stack, cls, txnsafety_violations):
    with txnsafety.request_scope("POST /hire/"), stack.Auto() as session:
        _hire(session, cls, cls, "ada")
    (violation,) = txnsafety_violations
    assert violation.code.value == "TXN105" and violation.model.endswith(cls.__name__)
    assert violation.detail == {"keys": "name", "check": "count() found none"}


def test_a_count_of_one_subclass_is_no_check_of_another(stack, txnsafety_violations):
    with txnsafety.request_scope("POST /hire/"), stack.Auto() as session:
        _hire(session, Manager, Engineer, "ada")          # no manager ada; an engineer ada is no duplicate
    assert txnsafety_violations == []


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_a_check_of_the_table_is_a_check_of_its_base_class(stack, cls, txnsafety_violations):
    with txnsafety.request_scope("POST /hire/"), stack.Auto() as session:
        if not session.scalar(select(exists().where(Staff.__table__.c.name == "ada"))):
            session.add(cls(id=1, name="ada"))
            session.commit()
    (violation,) = txnsafety_violations
    assert violation.code.value == "TXN105" and violation.model.endswith(cls.__name__)


def test_a_count_selected_from_a_subclass_checks_that_subclass(stack, txnsafety_violations):
    with txnsafety.request_scope("POST /hire/"), stack.Auto() as session:
        if session.scalar(select(func.count()).select_from(Intern).where(Intern.name == "ada")) == 0:
            session.add(Intern(id=1, name="ada"))
            session.commit()
    assert txnsafety_violations.codes() == ["TXN105"]


def test_the_table_maps_to_its_base_class_whatever_the_registry_order(monkeypatch):
    from sqlalchemy.orm import mapperlib
    real = mapperlib._all_registries

    def reordered(order):
        class Registry:
            def __init__(self, registry):
                self.mappers = sorted(registry.mappers, key=lambda m: order(m.class_.__name__))
        return lambda: [Registry(r) for r in real()]

    found = set()
    for order in (lambda name: name, lambda name: [-ord(c) for c in name]):
        monkeypatch.setattr(mapperlib, "_all_registries", reordered(order))
        lookups._mappers_seen[0] = -1                    # rebuild from this order
        found.add(lookups._classes_by_table()[Staff.__table__])
    lookups._mappers_seen[0] = -1
    assert found == {Staff}
