"""Stands for a third-party Django app installed in site-packages: a view that writes.

``__txnsafety_library__`` makes txnsafety treat this module as library code, as it
treats anything under site-packages.
"""
from __future__ import annotations

from django.http import HttpResponse
from django.urls import path

from fixtures.django_app.models import Account

__txnsafety_library__ = True


def count_visit(request, pk):
    account = Account.objects.get(pk=pk)
    account.balance += 1
    account.save()                                      # the library's own racy write
    return HttpResponse("ok")


def refresh_visit(request, pk):
    account = Account.objects.get(pk=pk)
    account.refresh_from_db()                           # the library's read (django-treebeard's forms do so)
    account.balance += 1
    account.save()
    return HttpResponse("ok")


urlpatterns = [path("visit/<int:pk>/", count_visit), path("refresh/<int:pk>/", refresh_visit)]
