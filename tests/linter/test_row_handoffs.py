"""Rows handed from one function to another across a project (method_callers.py,
param_chains.py, row_streams.py).

A plug-in's device class overrides a base model's ``verify_token``; the rows are loaded by a
generator in a module that never writes a row; a form loads the device through a class's
loader method and hands it to a helper that calls the method. Each read is unprotected, so
the call that writes the row is reported where the read is; the same code reading under a
row lock in a transaction is quiet.
"""
from __future__ import annotations

import ast
import textwrap

from txnsafety_lint.analysis import analyze_project
from txnsafety_lint.facts.config import Config

MODELS = textwrap.dedent("""\
    from django.db import models


    class Device(models.Model):
        user = models.IntegerField()

        def verify_token(self, token):
            return False

        @classmethod
        def from_persistent_id(cls, pk):
            return cls.objects.filter(pk=pk).first()


    class ThrottlingMixin(models.Model):
        failures = models.IntegerField(default=0)
    """)
PLUGIN = textwrap.dedent("""\
    from django.db import models
    from app.models import Device, ThrottlingMixin


    class CounterDevice(ThrottlingMixin, Device):
        last = models.IntegerField()

        def verify_token(self, token):
            if token > self.last:
                self.last = max(self.last, token)
                self.save()
                return True
            self.fail()
            return False

        def fail(self):
            self.failures += 1
            self.save()


    class StaticDevice(ThrottlingMixin, Device):
        used = models.BooleanField()

        def verify_token(self, token):
            self.used = True
            self.save()
            return True
    """)
LOADERS = textwrap.dedent("""\
    from django.db import transaction


    def devices_for_user(user):
        for model in device_classes():
            yield from model.objects.filter(user=user)


    def locked_devices(user):
        for model in device_classes():
            yield from model.objects.filter(user=user).select_for_update()


    def match_token(user, token):
        return next((d for d in devices_for_user(user) if d.verify_token(token)), None)


    def match_token_locked(user, token):
        with transaction.atomic():
            for device in locked_devices(user):
                if device.verify_token(token):
                    return device
        return None
    """)
FORMS = textwrap.dedent("""\
    from django.db import transaction
    from app.models import Device


    class TokenForm:
        def _check_token(self, token, device):
            return device if device.verify_token(token) else None

        def clean(self, pk, token):
            device = Device.from_persistent_id(pk)
            return self._check_token(token, device)

        def clean_locked(self, pk, token):
            with transaction.atomic():
                device = Device.objects.select_for_update().get(pk=pk)
                return self._check_token(token, device)
    """)


def lint(**files: str) -> dict[str, list[tuple[int, str, str]]]:
    parsed = [(f"app/{name}.py", text, ast.parse(text)) for name, text in files.items()]
    found = analyze_project(parsed, Config(), ["."])
    return {path.split("/")[-1]: [(f.line, f.code, f.message) for f in fs] for path, fs in found.items() if fs}


def test_an_override_of_a_base_method_is_resolved_on_a_row_of_unknown_class():
    found = lint(models=MODELS, devices=PLUGIN, loaders=LOADERS)
    (line, code, message), = found["loaders.py"]
    assert (line, code) == (15, "TXN102")
    # the override that loses the most is named: a value derived from the row, not a flag
    assert "changed (last)" in message and "read by `devices_for_user()`" in message


def test_rows_yielded_under_a_row_lock_are_quiet_in_a_transaction():
    found = lint(models=MODELS, devices=PLUGIN, loaders=LOADERS)
    assert not [f for f in found["loaders.py"] if f[0] >= 18]


def test_a_row_handed_to_a_helper_that_calls_the_method_is_reported_at_the_handing_call():
    found = lint(models=MODELS, devices=PLUGIN, forms=FORMS)
    (line, code, message), = found["forms.py"]
    assert (line, code) == (11, "TXN102")
    assert "read by `.from_persistent_id()`" in message and "written by `_check_token()`" in message


def test_without_the_overrides_nothing_is_written():
    found = lint(models=MODELS, loaders=LOADERS, forms=FORMS)
    assert "loaders.py" not in found and "forms.py" not in found
