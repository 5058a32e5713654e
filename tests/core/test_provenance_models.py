"""The code decides per attribute name, but only code that names the model counts.

An attribute name is shared by many models (``Value``, ``count``): privacyIDEA encrypts a
gateway option's ``Value`` in place (``row.Value = encrypt(row.Value)``) in a module that
never names its token-info or config rows, whose ``Value`` is written blind.  Modules
written at run time, loaded, then asked about.
"""
from __future__ import annotations

import sys

from txnsafety import provenance
from txnsafety.provenance import derived_somewhere

GATEWAY = '''
class Option:
    """A gateway's option row: its value is encrypted in place."""

def encrypt_in_place(row):
    row.Value = "enc:" + row.Value


class Counter:
    def bump(self):
        self.hits = self.hits + 1
'''

SETTINGS = '''
from prov_gateway import Counter


class Setting:
    """A setting row: its value comes from the administrator's form."""


class PageCounter(Counter):
    """Inherits the derivation of ``hits`` from its base."""


def save(setting, value):
    setting.Value = value
'''


def test_a_derivation_counts_only_for_the_models_its_file_names(tmp_path, monkeypatch):
    (tmp_path / "prov_gateway.py").write_text(GATEWAY)
    (tmp_path / "prov_settings.py").write_text(SETTINGS)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("prov_gateway", "prov_settings"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    import prov_gateway
    import prov_settings
    provenance.forget()
    try:
        assert derived_somewhere(prov_gateway.Option, "Value")
        assert not derived_somewhere(prov_settings.Setting, "Value")   # same name, another model
        assert derived_somewhere(prov_settings.PageCounter, "hits")    # named through its base
    finally:
        for name in ("prov_gateway", "prov_settings"):
            sys.modules.pop(name, None)
        provenance.forget()
