"""A model method that changes its own row (``self.n += 1; self.save()``), judged with its callers.

The method cannot see how its caller read the row, so alone it is reported at its own
write. Across the project, a caller that read the row without protection gets the
finding at its call, naming both ends. A method whose every call the project shows is made
under protection is not reported. A call the analysis did not see keeps the method's own
finding.
"""
from __future__ import annotations

import ast
import textwrap

from txnsafety_lint.analysis import analyze_project
from txnsafety_lint.facts.config import Config

MODELS = textwrap.dedent("""\
    from django.db import models


    class Device(models.Model):
        last_t = models.IntegerField()

        def verify_token(self, t):
            if t > self.last_t:
                self.last_t = self.last_t + 1
                self.save()
                return True
            return False
    """)
LOCKED_CALLER = textwrap.dedent("""\
    def match_token_locked(user, token):
        with transaction.atomic():
            device = Device.objects.select_for_update().get(user=user)
            return device.verify_token(token)
    """)
UNLOCKED_CALLER = textwrap.dedent("""\
    def match_token(user, token):
        device = Device.objects.get(user=user)
        return device.verify_token(token)
    """)
HEADER = "from django.db import transaction\nfrom .models import Device\n\n\n"


def lint(**files: str) -> dict[str, list[tuple[int, str, str]]]:
    parsed = [(f"app/{name}.py", text, ast.parse(text)) for name, text in files.items()]
    found = analyze_project(parsed, Config(), ["."])
    return {path.split("/")[-1]: [(f.line, f.code, f.message) for f in fs] for path, fs in found.items() if fs}


def test_alone_the_method_is_reported_at_its_write():
    found = lint(models=MODELS)
    assert [(line, code) for line, code, _m in found["models.py"]] == [(10, "TXN106")]
    assert "read by the caller of `Device.verify_token()`" in found["models.py"][0][2]


def test_an_unprotected_caller_is_reported_at_its_call_naming_both_ends():
    found = lint(models=MODELS, views=HEADER + UNLOCKED_CALLER + "\n\n" + LOCKED_CALLER)
    (line, code, message), = found["views.py"]
    assert (line, code) == (7, "TXN106")
    assert "read at line 6" in message and "written by `verify_token()` (models.py line 10)" in message
    assert [code for _l, code, _m in found["models.py"]] == ["TXN106"]


def test_every_call_under_protection_leaves_the_method_unreported():
    assert lint(models=MODELS, views=HEADER + LOCKED_CALLER) == {}


def test_a_call_the_analysis_cannot_judge_keeps_the_method_reported():
    other = "def f(d):\n    return d.verify_token(1)\n"
    found = lint(models=MODELS, views=HEADER + LOCKED_CALLER, other=other)
    assert [code for _l, code, _m in found["models.py"]] == ["TXN106"]


DISMISS = textwrap.dedent("""\
    from django.db import models


    class Check(models.Model):
        dismissed = models.BooleanField()

        def set_dismiss(self, state, recurse=True):
            if recurse:
                for child in Check.objects.select_for_update().filter(name=self.name):
                    child.set_dismiss(state, recurse=False)
    """)
ATOMIC_VIEW = textwrap.dedent("""\
    @transaction.atomic
    def ignore_check(request, pk):
        check = Check.objects.get(pk=pk)
        check.set_dismiss(True)
    """)


def test_a_lock_in_a_method_whose_only_caller_is_atomic_is_fine_its_recursion_included():
    alone = lint(models=DISMISS)
    assert [code for _l, code, _m in alone["models.py"]] == ["TXN108"]
    header = HEADER.replace("Device", "Check")
    assert lint(models=DISMISS, views=header + ATOMIC_VIEW) == {}
    outside = ATOMIC_VIEW.replace("@transaction.atomic\n", "")
    assert [code for _l, code, _m in lint(models=DISMISS, views=header + outside)["models.py"]] == ["TXN108"]


REFRESH = textwrap.dedent("""\
    from django.db import models


    class Seat(models.Model):
        taken = models.BooleanField()

        def refresh_for_update(self):
            fresh = Seat.objects.select_for_update().get(pk=self.pk)
            if "taken" not in fresh.get_deferred_fields():
                self.taken = fresh.taken
    """)
TAKE = textwrap.dedent("""\
    def take(request, pk):
        seat = Seat.objects.get(pk=pk)
        seat.refresh_for_update()
        seat.taken = True
        seat.save()
    """)


def confidences(found: dict, name: str) -> list[tuple[str, str]]:
    return [(f.code, f.confidence.label) for f in found.get(name, [])]


def test_a_lock_taken_only_for_callers_the_project_does_not_show_is_low_confidence():
    """``refresh_for_update()`` writes nothing after its locking read: the lock is for its
    caller.  With no caller in the project, whether one holds a transaction is unknown
    (LOW); a caller outside one makes it HIGH; callers inside one leave it unreported."""
    def run(**files):
        parsed = [(f"app/{n}.py", t, ast.parse(t)) for n, t in files.items()]
        return {p.split("/")[-1]: fs for p, fs in analyze_project(parsed, Config(), ["."]).items()}
    header = HEADER.replace("Device", "Seat")
    assert confidences(run(models=REFRESH), "models.py") == [("TXN108", "low")]
    assert confidences(run(models=REFRESH, views=header + TAKE), "models.py") == [("TXN108", "high")]
    atomic = TAKE.replace("def take", "@transaction.atomic\ndef take")
    assert confidences(run(models=REFRESH, views=header + atomic), "models.py") == []


SOURCE_SAVE = textwrap.dedent("""\
    from django.db import models


    class Unit(models.Model):
        state = models.IntegerField()

        def save(self, *args, **kwargs):
            super().save(*args, **kwargs)
            self.source_unit_save()

        def source_unit_save(self):
            for unit in self.unit_set.select_for_update():
                unit.state = 0
                unit.save()
    """)


def test_a_lock_reached_only_through_a_model_method_with_unseen_callers_is_low_confidence():
    """``save()`` calls the locking method, and nothing the project shows calls ``save()``
    outside a transaction (its calls are everywhere, as ``row.save()``): LOW.  A view that
    calls the locking method outside a transaction is an entry point the project shows: HIGH."""
    def run(**files):
        parsed = [(f"app/{n}.py", t, ast.parse(t)) for n, t in files.items()]
        return {p.split("/")[-1]: fs for p, fs in analyze_project(parsed, Config(), ["."]).items()}
    assert confidences(run(models=SOURCE_SAVE), "models.py") == [("TXN108", "low")]
    view = HEADER.replace("Device", "Unit") + textwrap.dedent("""\
        def resave(request, pk):
            unit = Unit.objects.get(pk=pk)
            unit.source_unit_save()
        """)
    assert confidences(run(models=SOURCE_SAVE, views=view), "models.py") == [("TXN108", "high")]


CONFIG_MODEL = textwrap.dedent("""\
    from sqlalchemy import Column, JSON
    from sqlalchemy.orm import Session

    from .base_class import Base


    class ApplicationConfig(Base):
        api_set = Column(JSON)

        @classmethod
        def create_or_update(cls, db: Session, *, data):
            existing = db.query(cls).first()
            if existing:
                return existing.update(db=db, data=data)
            return cls.create(db=db, data=data)

        def update(self, db: Session, data, merge: bool = True):
            if merge:
                self.api_set = deep_update(self.api_set, data["api_set"])
            else:
                self.api_set = data["api_set"]
            self.save(db=db)
            return self
    """)
TAXONOMY_UTILS = textwrap.dedent("""\
    from sqlalchemy.orm import Session


    def check_for_taxonomy_reactivation(db: Session, taxonomy_type, element_data, handler):
        model_class = handler.get_model()
        disabled_element = (
            db.query(model_class)
            .filter(model_class.active.is_(False), model_class.name == element_data["name"])
            .first()
        )
        return disabled_element


    def handle_taxonomy_reactivation(db: Session, taxonomy_type, element, element_data, handler):
        updated_data = element_data.copy()
        updated_data["active"] = True
        activate_taxonomy_parents(element, db)
        element.update(db, data=updated_data)
        return element


    def activate_taxonomy_parents(resource, db: Session) -> None:
        parent = resource.parent
        if parent:
            parent.active = True
            db.flush()
            activate_taxonomy_parents(parent, db)
    """)
TAXONOMY_SERVICE = textwrap.dedent("""\
    from sqlalchemy.orm import Session

    from .utils import check_for_taxonomy_reactivation, handle_taxonomy_reactivation


    class TaxonomyService:
        def __init__(self, db: Session):
            self.db = db

        def create_or_update_element(self, taxonomy_type, element_data):
            handler = self._get_handler(taxonomy_type)
            element = check_for_taxonomy_reactivation(self.db, taxonomy_type, element_data, handler)
            if element:
                return handle_taxonomy_reactivation(self.db, taxonomy_type, element, element_data, handler)
            return self.create_element(taxonomy_type, element_data)
    """)
OTHER_UPDATE = textwrap.dedent("""\
    from .base_class import Base


    class TaxonomyElement(Base):
        def update(self, db, data):
            for key, value in data.items():
                setattr(self, key, value)
            return self.save(db)
    """)


def test_a_row_of_unknown_model_calls_the_one_model_method_of_that_name():
    found = lint(application_config=CONFIG_MODEL, utils=TAXONOMY_UTILS, taxonomy_service=TAXONOMY_SERVICE)
    assert [code for _line, code, _m in found["taxonomy_service.py"]] == ["TXN102"]


def test_a_method_name_another_class_defines_too_is_not_resolved_for_a_row_of_unknown_model():
    # ``element.update(db, data)`` on a row whose model the walk cannot name: another model
    # defines ``update()`` too, so the call is not known to be the config's, whose merge of
    # its JSON column made it a read-modify-write (issue 31)
    found = lint(application_config=CONFIG_MODEL, utils=TAXONOMY_UTILS, taxonomy_service=TAXONOMY_SERVICE,
                 taxonomy=OTHER_UPDATE)
    assert "taxonomy_service.py" not in found
