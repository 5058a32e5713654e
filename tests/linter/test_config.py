"""Configuration: presets chosen by imports, lists extended from pyproject.toml and flake8."""
from __future__ import annotations

import textwrap

import pytest

from txnsafety_lint.analysis import analyze_source
from txnsafety_lint.cli import main
from txnsafety_lint.facts.config import Config, config_from, name_matches, vocab_for

CUSTOM = textwrap.dedent("""\
    from myorm import load_user, persist, with_row_lock


    def bump(uid):
        user = load_user(uid)
        user.karma = user.karma * 2
        persist(user)
        user.save()


    def guarded(uid):
        with with_row_lock(uid):
            user = load_user(uid)
            user.karma = user.karma * 2
            user.save()
    """)


def codes(src, cfg):
    return sorted((f.line, f.code) for f in analyze_source(src, cfg))


def test_extra_gets_and_locks_from_config():
    assert codes(CUSTOM, Config()) == []
    cfg = Config().update({"gets": ["myorm.load_user"], "locks": "with_row_lock"})
    assert codes(CUSTOM, cfg) == [(8, "TXN102")]


def test_pyproject_table(tmp_path, capsys):
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent("""\
        [tool.txnsafety]
        gets = ["load_user"]
        locks = ["with_row_lock"]
        disable = []
        """))
    (tmp_path / "app.py").write_text(CUSTOM)
    assert main([str(tmp_path)]) == 1
    assert ":8:" in capsys.readouterr().out
    (tmp_path / "pyproject.toml").write_text('[tool.txnsafety]\ngets = ["load_user"]\n'
                                             'disable = ["TXN102"]\n')
    assert main([str(tmp_path)]) == 0


def test_pyproject_errors_are_clear(tmp_path, capsys):
    (tmp_path / "pyproject.toml").write_text('[tool.txnsafety]\nnot_an_option = 1\n')
    (tmp_path / "app.py").write_text(CUSTOM)
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "pyproject.toml: [tool.txnsafety] unknown key 'not_an_option'" in err
    assert len(err.strip().splitlines()) == 1
    (tmp_path / "pyproject.toml").write_text('[tool.txnsafety\n')
    assert main([str(tmp_path)]) == 2
    assert "configuration" in capsys.readouterr().err


def test_isolation_levels():
    with pytest.raises(ValueError):
        Config().update({"isolation": "chaos"})
    src = textwrap.dedent("""\
        from django.db import transaction
        from shop.models import Article


        def view(pk):
            with transaction.atomic():
                article = Article.objects.get(pk=pk)
                article.views += 1
                article.save()
        """)
    assert codes(src, Config()) == [(9, "TXN106")]
    assert codes(src, Config().update({"isolation": "serializable"})) == []
    assert codes(src, Config().update({"isolation": "mysql-repeatable-read"})) == [(9, "TXN106")]


def test_txn109_is_opt_in():
    src = textwrap.dedent("""\
        from django.db import transaction
        from shop.models import Article


        def view(pk, title):
            with transaction.atomic():
                article = Article.objects.get(pk=pk)
                article.title = title
                article.save()
        """)
    assert codes(src, Config()) == []
    assert codes(src, Config().update({"enable": ["txn109"]})) == [(9, "TXN109")]


def test_presets_from_imports():
    assert vocab_for({"django"}, Config()).frameworks == {"django", "txnsafety"}
    assert "ndb" in vocab_for(set(), Config()).frameworks          # unknown: every preset
    v = vocab_for({"ndb"}, Config())
    assert v.ndb_serializable and "ndb.transactional" in v.retrying


def test_extra_side_effects_and_retrying_transactions():
    src = textwrap.dedent("""\
        from django.db import transaction
        from myapp import notify


        @transaction.atomic
        def view(pk):
            notify(pk)
        """)
    assert codes(src, Config()) == []
    assert codes(src, Config().update({"side-effects": "notify",
                                       "side-effects-in-any-transaction": "true"})) == [(7, "TXN107")]
    assert codes(src, Config().update({"side-effects": "notify",
                                       "retrying-transactions": "transaction.atomic"})) == [(7, "TXN107")]


def test_versioned_models_option():
    src = textwrap.dedent("""\
        from shop.models import Doc


        def edit(pk, text):
            doc = Doc.objects.get(pk=pk)
            doc.text = text
            doc.save()
        """)
    assert codes(src, Config()) == [(7, "TXN102")]
    assert codes(src, Config().update({"versioned-models": ["Doc"]})) == []


def test_name_matching():
    assert name_matches("self.redis.lock", {"redis.lock"})
    assert name_matches("user_write_lock", {"txnsafety.locks.user_write_lock"})
    assert not name_matches("r.unlock", {"lock"})
    assert not name_matches("a.lock", {"redis.lock"})


def test_config_from_mapping_and_file(tmp_path):
    p = tmp_path / "pyproject.toml"
    p.write_text('[tool.txnsafety.lint]\nlocks = ["my_lock"]\nisolation = "serializable"\n')
    cfg = config_from({"locks": "other_lock"}, str(p))
    assert {"my_lock", "other_lock"} <= cfg.locks and cfg.isolation == "serializable"


def test_extra_puts():
    src = textwrap.dedent("""\
        from shop.models import Doc


        def edit(pk):
            doc = Doc.objects.get(pk=pk)
            doc.text = doc.text.strip()
            doc.persist()
        """)
    assert codes(src, Config()) == []
    assert codes(src, Config().update({"puts": ["persist"]})) == [(7, "TXN102")]
