"""The linter corpora (benchmarks/corpus/): their files parse, and the scoring counts right.

The corpus benchmark itself downloads releases from PyPI and is not run here; these
tests check what CI can check without the network: every committed entry follows the
format (a typo in a label or a missing path would silently drop it from the figures),
and the scoring of a bug, a look-alike and a judged finding on a small tree made here.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

from corpus.entries import CorpusError, Label, load_bugs, load_judged  # noqa: E402
from corpus.linters import Finding  # noqa: E402
from corpus.score import precision, score_bug, score_project  # noqa: E402
from corpus.spans import function_span  # noqa: E402

APP = '''\
import functools


class Wallet:
    @functools.cache
    def add(self, n):
        self.n += n
        self.save()


def vote(item):
    item.votes += 1
    item.save()
'''


def test_committed_corpus_files_follow_the_format():
    bugs = load_bugs()
    judged = load_judged()
    assert len({b.id for b in bugs}) == len(bugs)
    for bug in bugs:
        assert bug.codes <= {f"TXN{n}" for n in range(101, 113)}, bug.id
    for project in judged:
        assert all(j.label in Label for j in project.judgments.values())


def test_a_bad_label_names_the_file_and_entry(tmp_path):
    (tmp_path / "p.toml").write_text('[project]\nname = "x"\nversion = "1"\n'
                                     '[[finding]]\npath = "a.py"\nline = 1\ncode = "TXN102"\nlabel = "tp"\n')
    with pytest.raises(CorpusError, match=r"p.toml finding #1: label must be TP, FP or noise"):
        load_judged(tmp_path)


def test_function_span_includes_decorators_and_nested_names(tmp_path):
    (tmp_path / "app.py").write_text(APP)
    assert function_span(tmp_path / "app.py", "Wallet.add") == (5, 8)
    assert function_span(tmp_path / "app.py", "vote") == (11, 13)
    assert function_span(tmp_path / "app.py", "add") is None


def _bug_file(tmp_path: Path) -> Path:
    bugs = tmp_path / "bugs"
    bugs.mkdir()
    (bugs / "shop.toml").write_text(
        '[project]\nname = "shop"\n'
        '[[bug]]\nid = "vote"\nversion = "1.0"\npath = "app.py"\nfunction = "vote"\n'
        'codes = ["TXN106"]\nfixed_version = "1.1"\n'
        '[[bug]]\nid = "add"\nversion = "1.0"\npath = "app.py"\nfunction = "Wallet.add"\ncodes = ["TXN102"]\n')
    return bugs


def test_a_bug_is_caught_only_by_an_expected_code_inside_its_function(tmp_path):
    (tmp_path / "app.py").write_text(APP)
    vote, add = load_bugs(_bug_file(tmp_path))
    findings = {
        "1.0": [Finding("app.py", 13, "TXN106", "m"), Finding("app.py", 8, "TXN106", "m")],
        "1.1": [],
    }
    result = score_bug(vote, lambda place: (tmp_path, findings[place.release.version]))
    assert (result.caught, result.lookalike_flagged) == (True, False)
    result = score_bug(add, lambda place: (tmp_path, findings[place.release.version]))
    assert result.caught is False          # a finding in the function, but not an expected code
    findings["1.1"] = [Finding("app.py", 12, "TXN102", "m")]
    assert score_bug(vote, lambda place: (tmp_path, findings[place.release.version])).lookalike_flagged


def test_precision_and_noise_count_judged_findings_and_list_the_rest(tmp_path):
    judged = tmp_path / "precision"
    judged.mkdir()
    entries = "".join(f'[[finding]]\npath = "a.py"\nline = {line}\ncode = "TXN102"\nlabel = "{label}"\n'
                      for line, label in ((1, "TP"), (2, "TP"), (3, "FP"), (4, "noise")))
    (judged / "p.toml").write_text('[project]\nname = "p"\nversion = "1"\n' + entries)
    (project,) = load_judged(judged)
    found = [Finding("a.py", line, "TXN102", "m") for line in (1, 2, 3, 4, 5)]
    result = score_project(project, 100, found)
    assert [f.line for f in result.unjudged] == [5]
    prec, noise, total, unjudged = precision([result])
    assert (round(prec, 3), noise, total, unjudged) == (0.667, 0.2, 5, 1)
