"""benchmarks/_switch.py: a monkeypatching library switched in and out of one process.

bench_peers.py times django-zeal, nplusone and sentry-sdk against bare Django in the
same process by capturing what each one's setup replaced; these tests patch a real
module and class the way those libraries do and check that the capture puts exactly
that in place and takes it out again.
"""
from __future__ import annotations

import sys
import types

from benchmarks._switch import capture


def _module() -> types.ModuleType:
    """A throwaway module with a function, a class with a method, and a data attribute."""
    module = types.ModuleType("txnsafety_switch_target")
    exec("def helper():\n    return 'original'\n"
         "class Target:\n    def method(self):\n        return 'original'\n"
         "counter = 0\n", module.__dict__)
    module.Target.__module__ = module.__name__
    sys.modules[module.__name__] = module
    return module


def test_capture_records_a_patch_and_switches_it():
    module = _module()
    try:
        original_helper, original_method = module.helper, module.Target.method

        def library_setup():  # what a library's install does: wrap, replace, add
            inner = module.Target.method
            module.Target.method = lambda self: "patched " + inner(self)
            module.helper = lambda: "patched"
            module.Target.added = staticmethod(lambda: "added")
            module.counter = 1  # data, not a patch: left alone

        patches = capture(library_setup)
        names = {str(change) for change in patches.changes}
        assert {"txnsafety_switch_target.Target.method", "txnsafety_switch_target.helper",
                "txnsafety_switch_target.Target.added"} <= names
        # taken out again after capturing: the pristine state
        assert module.helper is original_helper and module.Target.method is original_method
        assert not hasattr(module.Target, "added")

        patches.apply()
        assert module.Target().method() == "patched original" and module.helper() == "patched"
        assert module.Target.added() == "added"
        patches.revert()
        assert module.Target().method() == "original" and module.helper() == "original"
        assert not hasattr(module.Target, "added")
        assert module.counter == 1
    finally:
        del sys.modules[module.__name__]


def test_two_libraries_captured_in_turn_wrap_the_original_not_each_other():
    module = _module()
    try:
        def wrap(label):
            def setup():
                inner = module.Target.method
                module.Target.method = lambda self: f"{label}({inner(self)})"
            return setup

        first, second = capture(wrap("a")), capture(wrap("b"))
        second.apply()
        assert module.Target().method() == "b(original)"
        second.revert()
        first.apply()
        assert module.Target().method() == "a(original)"
        first.revert()
        assert module.Target().method() == "original"
    finally:
        del sys.modules[module.__name__]
