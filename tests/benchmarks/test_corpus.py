"""The linter corpora (benchmarks/corpus/): their files parse, and the scoring counts right.

The corpus benchmark itself downloads releases from PyPI and is not run here; these
tests check what CI can check without the network: every committed entry follows the
format (a typo in a label or a missing path would silently drop it from the figures),
and the scoring of a bug, a look-alike and a judged finding on a small tree made here.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_linter_corpus import in_half  # noqa: E402
from corpus.entries import CorpusError, Label, load_bugs, load_judged  # noqa: E402
from corpus.halves import Half, half_of  # noqa: E402
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
    figures = precision([result])
    assert (round(figures.precision, 3), figures.noise_share, figures.findings, figures.unjudged) == \
        (0.667, 0.2, 5, 1)
    assert round(figures.strict_precision, 3) == 0.667      # no TP judged weak


def _judged(tmp_path: Path, project: str, findings: str) -> Path:
    judged = tmp_path / "precision"
    judged.mkdir(exist_ok=True)
    (judged / f"{project}.toml").write_text(f'[project]\nname = "{project}"\nversion = "1"\n' + findings)
    return judged


def test_strict_precision_leaves_out_weak_tps(tmp_path):
    entries = "".join(f'[[finding]]\npath = "a.py"\nline = {line}\ncode = "TXN102"\nlabel = "{label}"\n{extra}'
                      for line, label, extra in ((1, "TP", ""), (2, "TP", "weak = true\n"),
                                                 (3, "TP", "weak = false\n"), (4, "FP", "")))
    (project,) = load_judged(_judged(tmp_path, "p", entries))
    assert [j.weak for j in project.judgments.values()] == [False, True, False, False]
    figures = precision([score_project(project, 100, [Finding("a.py", n, "TXN102", "m") for n in (1, 2, 3, 4)])])
    assert (figures.precision, figures.strict_precision) == (0.75, 0.5)


@pytest.mark.parametrize("extra, message", [
    ('label = "FP"\nweak = true\n', "weak applies to a TP only"),
    ('label = "TP"\nweak = "yes"\n', "weak must be true or false"),
])
def test_a_misused_weak_flag_names_the_entry(tmp_path, extra, message):
    judged = _judged(tmp_path, "p", f'[[finding]]\npath = "a.py"\nline = 1\ncode = "TXN102"\n{extra}')
    with pytest.raises(CorpusError, match=f"p.toml finding #1: {message}"):
        load_judged(judged)


def test_a_fresh_round_names_the_linter_it_was_judged_on(tmp_path):
    judged = _judged(tmp_path, "fresh", 'round = "fresh-2026-11-28"\njudged_before_change = "859a1e5"\n')
    (project,) = load_judged(judged)
    assert (project.round, project.judged_before_change, project.half) == ("fresh-2026-11-28", "859a1e5", None)
    (judged / "fresh.toml").write_text('[project]\nname = "fresh"\nversion = "1"\nround = "r1"\n')
    with pytest.raises(CorpusError, match="fresh.toml \\[project\\]: missing or empty 'judged_before_change'"):
        load_judged(judged)


def test_the_halves_are_fixed_by_sha256_whatever_the_process():
    # sha256 of "a" starts with 0xca (even: tune), of "old-a" with 0xcd (odd: test); two fresh
    # interpreters with different hash seeds must agree with this one (hash() would not)
    keys = ("a", "old-a", "vote", "add")
    code = ("import sys; sys.path.insert(0, 'benchmarks'); from corpus.halves import half_of; "
            f"print(' '.join(half_of(k).value for k in {keys!r}))")
    runs = {tuple(subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                                 env={"PYTHONHASHSEED": seed}, check=True).stdout.split())
            for seed in ("1", "2")}
    assert runs == {tuple(half_of(k).value for k in keys)}
    assert (half_of("a"), half_of("old-a")) == (Half.TUNE, Half.TEST)


def test_the_committed_corpora_split_into_two_halves_of_about_the_same_size():
    bugs, projects = load_bugs(), [p for p in load_judged() if p.round is None]
    for entries in (bugs, projects):
        tune = sum(1 for e in entries if e.half is Half.TUNE)
        assert abs(tune - (len(entries) - tune)) <= max(2, len(entries) // 5)


def test_a_half_keeps_its_bugs_and_split_projects_and_every_fresh_round(tmp_path):
    bugs = load_bugs(_bug_file(tmp_path))
    judged = _judged(tmp_path, "old-a", "")
    _judged(tmp_path, "a", "")
    _judged(tmp_path, "fresh", 'round = "r1"\njudged_before_change = "abc"\n')
    projects = load_judged(judged)
    for half in (Half.TUNE, Half.TEST):
        kept_bugs, kept = in_half(bugs, projects, half.value)
        assert kept_bugs and all(b.half is half for b in kept_bugs)
        assert len(kept) == 2      # one split project of each half, and the fresh one
        assert {p.release.name for p in kept} == \
            {"fresh"} | {p.release.name for p in projects if p.round is None and half_of(p.release.name) is half}
    assert in_half(bugs, projects, "all") == (bugs, projects)
