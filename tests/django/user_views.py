"""The application's own view (user code) that reads and writes, behind its own middleware."""
from __future__ import annotations

from django.http import HttpResponse
from django.urls import path

from fixtures.django_app.models import Account


def visit(request, pk):
    account = Account.objects.get(pk=pk)                # the user's read
    account.balance += 1
    account.save()                                      # the user's write
    return HttpResponse("ok")


urlpatterns = [path("visit/<int:pk>/", visit)]
