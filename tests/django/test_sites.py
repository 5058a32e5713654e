"""Reports name the user's call that wrote: not the model's ``save()`` override, not a
middleware above a library's write, not the console script that started the process."""
from __future__ import annotations

import os
import sys
import sysconfig

from django.test import override_settings

from fixtures.django_app.models import Profile
from txnsafety.sites import is_library_file

HERE = os.path.abspath(__file__)


def _visit(db):
    profile = Profile.objects.using(db).get(pk=1)
    profile.visits += 1
    profile.save()                                      # the user's call that wrote
    return profile


def test_write_site_is_the_callers_save_not_the_models_override(db, txnsafety_violations):
    _visit(db)
    (violation,) = txnsafety_violations
    assert violation.write_site.file == HERE
    assert violation.write_site.function == "_visit"
    assert violation.detail["fields written"] == "the whole row"


def test_write_site_of_a_library_view_behind_a_user_middleware_is_the_librarys(
        sqlite_db, client, txnsafety_violations):
    with override_settings(ROOT_URLCONF="tests.django.thirdparty",
                           MIDDLEWARE=["txnsafety.django.middleware.TxnSafetyMiddleware",
                                       "tests.django.user_middleware.PassThrough"]):
        assert client.get("/visit/1/").status_code == 200
    (violation,) = txnsafety_violations
    assert violation.write_site.function == "count_visit"
    assert violation.write_site.file.endswith(os.path.join("django", "thirdparty.py"))


def test_console_scripts_are_not_user_code():
    scripts = sysconfig.get_paths()["scripts"]
    assert is_library_file(os.path.join(scripts, "pytest"))
    assert is_library_file(os.path.join(os.path.dirname(sys.executable), "django-admin"))
    assert not is_library_file(HERE)
