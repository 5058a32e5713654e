"""Reports name the user's call that read and wrote: not the model's ``save()`` or
``refresh_from_db()`` override, not a middleware above a library's read or write, not
the console script that started the process."""
from __future__ import annotations

import asyncio
import os
import sys
import sysconfig

from django.test import override_settings

import txnsafety
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


def test_read_site_of_a_library_view_behind_a_user_middleware_is_the_librarys(
        sqlite_db, client, txnsafety_violations):
    """The read was made by the library's view (Django's generic ``UpdateView.get_object``
    on django-oscar's dashboard): the middleware above it only passed the request on."""
    with override_settings(ROOT_URLCONF="tests.django.thirdparty",
                           MIDDLEWARE=["txnsafety.django.middleware.TxnSafetyMiddleware",
                                       "tests.django.user_middleware.PassThrough"]):
        assert client.get("/visit/1/").status_code == 200
    (violation,) = txnsafety_violations
    assert violation.read_site.function == "count_visit"
    assert violation.read_site.file.endswith(os.path.join("django", "thirdparty.py"))


def test_refresh_by_a_library_behind_a_user_middleware_is_the_librarys(sqlite_db, client, txnsafety_violations):
    with override_settings(ROOT_URLCONF="tests.django.thirdparty",
                           MIDDLEWARE=["txnsafety.django.middleware.TxnSafetyMiddleware",
                                       "tests.django.user_middleware.PassThrough"]):
        assert client.get("/refresh/1/").status_code == 200
    (violation,) = txnsafety_violations
    assert violation.read_site.function == "refresh_visit"
    assert violation.read_site.file.endswith(os.path.join("django", "thirdparty.py"))


def test_a_user_view_behind_a_user_middleware_keeps_its_own_sites(sqlite_db, client, txnsafety_violations):
    with override_settings(ROOT_URLCONF="tests.django.user_views",
                           MIDDLEWARE=["txnsafety.django.middleware.TxnSafetyMiddleware",
                                       "tests.django.user_middleware.PassThrough"]):
        assert client.get("/visit/1/").status_code == 200
    (violation,) = txnsafety_violations
    assert violation.read_site.function == violation.write_site.function == "visit"
    assert violation.read_site.file == violation.write_site.file == os.path.join(
        os.path.dirname(HERE), "user_views.py")


def _reload_and_visit(db, profile):
    profile.refresh_from_db()                           # the user's call that read
    profile.visits += 1
    profile.save()
    return profile


def test_read_site_is_the_callers_refresh_not_the_models_override(db, txnsafety_violations):
    profile = Profile.objects.using(db).get(pk=1)
    _reload_and_visit(db, profile)
    (violation,) = txnsafety_violations
    assert violation.read_site.file == HERE
    assert violation.read_site.function == "_reload_and_visit"
    assert violation.write_site.function == "_reload_and_visit"


def test_async_refresh_names_the_awaiting_line(db, txnsafety_violations):
    async def reload_and_visit(profile):
        await profile.arefresh_from_db()                # the user's call that read
        profile.visits += 1
        await profile.asave()

    async def main():
        with txnsafety.request_scope("POST /visit/"):
            profile = await Profile.objects.using(db).aget(pk=1)
            await reload_and_visit(profile)

    asyncio.run(main())
    (violation,) = txnsafety_violations
    assert violation.read_site.file == HERE and violation.read_site.function == "reload_and_visit"


def test_console_scripts_are_not_user_code():
    scripts = sysconfig.get_paths()["scripts"]
    assert is_library_file(os.path.join(scripts, "pytest"))
    assert is_library_file(os.path.join(os.path.dirname(sys.executable), "django-admin"))
    assert not is_library_file(HERE)
