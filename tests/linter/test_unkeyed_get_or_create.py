"""``get_or_create()`` over a lookup no unique key covers (rules/unkeyed_get_or_create.py),
across a project's modules as ``txnsafety lint`` sees them."""
from __future__ import annotations

import textwrap

from txnsafety_lint.cli import main

MODELS = """\
from django.db import models


class Tagging(models.Model):
    thread = models.ForeignKey("Thread", on_delete=models.CASCADE)
    tag = models.CharField(max_length=50)


class Favorite(models.Model):
    thread = models.ForeignKey("Thread", on_delete=models.CASCADE)
    user = models.ForeignKey("auth.User", on_delete=models.CASCADE)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["thread", "user"], name="favorite_once")]
"""

VIEWS = """\
from forum.models import Favorite, Tagging


def tag(request, thread):
    Tagging.objects.get_or_create(thread=thread, tag=request.POST["tag"])


def favorite(request, thread):
    Favorite.objects.get_or_create(thread=thread, user=request.user)
"""


def lint(tmp_path, capsys, monkeypatch, models=MODELS):
    for rel, text in (("pyproject.toml", "[tool.txnsafety]\n"), ("forum/models.py", models),
                      ("forum/views.py", VIEWS)):
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    monkeypatch.chdir(tmp_path)
    main([".", "--no-respect-gitignore"])
    return [line for line in capsys.readouterr().out.splitlines() if "TXN105" in line]


def test_reported_where_no_key_covers_the_lookup_and_not_where_a_unique_constraint_does(
        tmp_path, capsys, monkeypatch):
    # the models module spells the key only as ``UniqueConstraint``: it must still be read
    assert "unique" not in MODELS
    found = lint(tmp_path, capsys, monkeypatch)
    assert len(found) == 1 and found[0].startswith("forum/views.py:5:")
    assert "`Tagging.objects.get_or_create()`" in found[0] and "(tag, thread)" in found[0]


def test_a_model_with_a_base_from_a_library_gets_no_verdict(tmp_path, capsys, monkeypatch):
    models = MODELS.replace("from django.db import models\n",
                            "from django.db import models\nfrom taggit.models import TaggedItemBase\n")
    models = models.replace("class Tagging(models.Model):", "class Tagging(TaggedItemBase):")
    assert lint(tmp_path, capsys, monkeypatch, models) == []
