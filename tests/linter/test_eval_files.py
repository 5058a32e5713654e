"""Every eval file in fixtures/lint: exactly the (line, code) pairs written inline."""
from __future__ import annotations

import pytest

from txnsafety_lint.analysis import analyze_source

from .helpers import expected, fixture_config, fixture_files

FILES = fixture_files()


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_eval_file(path):
    source = path.read_text(encoding="utf-8")
    want = expected(source)
    findings = analyze_source(source, fixture_config(source), str(path))
    got = {(f.line, f.code) for f in findings}
    detail = "\n".join(f"  {f.line}: {f.message}" for f in findings)
    assert got == want, f"missing {sorted(want - got)}, unexpected {sorted(got - want)}\n{detail}"


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_eval_file_messages_name_lines(path):
    source = path.read_text(encoding="utf-8")
    for f in analyze_source(source, fixture_config(source), str(path)):
        assert f.message.startswith(f.code + " ")
        assert f"line {f.line}" in f.message or f.code == "TXN108" and str(f.line) in f.message


def test_there_are_bad_and_good_twins_for_every_code():
    seen = {}
    for path in FILES:
        source = path.read_text(encoding="utf-8")
        for _line, code in expected(source):
            seen.setdefault(code, set()).add(path.name.split("_")[0])
    for code in ("TXN101", "TXN102", "TXN103", "TXN104", "TXN105", "TXN106", "TXN107",
                 "TXN108", "TXN109"):
        assert code in seen, code
