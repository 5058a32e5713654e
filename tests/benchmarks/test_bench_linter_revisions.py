"""bench_linter_revisions.py: two linters timed side by side on unpacked corpus releases.

The timing itself is a benchmark, not a test; what is tested is that a run with nothing to
time says so and exits 2 (instead of printing ratios of nothing), and that one fresh process
on a small project is timed at a positive number of CPU seconds.
"""
from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import bench_linter_revisions as bench  # noqa: E402
from corpus.linters import working_tree  # noqa: E402


def test_no_matching_release_is_an_error_naming_the_cache(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TXNSAFETY_CORPUS_CACHE", str(tmp_path))
    (tmp_path / "unpacked" / "khoj-1.0-wheel").mkdir(parents=True)
    assert bench.main(["--base", "HEAD", "--project", "no-such-project"]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / "unpacked") in err and "no-such-project" in err


def test_one_process_is_timed_in_cpu_seconds(tmp_path, monkeypatch):
    monkeypatch.setenv("TXNSAFETY_CORPUS_CACHE", str(tmp_path / "cache"))
    project = tmp_path / "proj"
    project.mkdir()
    (project / "views.py").write_text(
        "from shop.models import Voucher\n\n\ndef redeem(code):\n"
        "    voucher = Voucher.objects.get(code=code)\n    voucher.uses += 1\n    voucher.save()\n")
    assert bench.cpu_seconds(working_tree(), project) > 0
