"""Each linter code's page says what ``--fix`` does with it (its applicability), and every
before/after pair the page shows is exactly what ``--fix --unsafe-fixes`` writes."""
from __future__ import annotations

import re

import pytest

from txnsafety_lint.analysis import analyze_source
from txnsafety_lint.facts.config import LINTER_CODES, Config
from txnsafety_lint.fix.apply import fixed
from txnsafety_lint.fix.plan import FilePlan, fix_for
from txnsafety_lint.fix.source import FileSource
from txnsafety_lint.fixing import rechecker

from .test_docs import DOCS, as_function, sections

SECTION = "Automatic fix"


def fix_all(source: str) -> str:
    cfg = Config().update({"enable": ["TXN109"], "gets": ["get_user"]})
    src = FileSource("m.py", source.encode("utf-8"))
    found = analyze_source(source, cfg, "m.py")
    plan = FilePlan("m.py", src, {f: fix_for(src, f, rechecker(cfg)) for f in found})
    outcome = fixed(plan, unsafe_fixes=True)
    return outcome.new if outcome.new is not None else source


@pytest.mark.parametrize("code", LINTER_CODES)
def test_page_has_its_automatic_fix_and_the_pairs_are_what_fix_writes(code):
    text = (DOCS / f"{code}.md").read_text()
    assert f"\n## {SECTION}\n" in text, code
    body = text.split(f"\n## {SECTION}\n", 1)[1].split("\n## ", 1)[0]
    assert re.search(r"\*\*(Safe|Unsafe|None)\*\*", body), code
    blocks = sections(text)[SECTION]
    assert len(blocks) % 2 == 0, code
    assert bool(blocks) == ("**Safe**" in body or "**Unsafe**" in body), code
    for before, after in zip(blocks[::2], blocks[1::2]):
        assert fix_all(as_function(before)) == as_function(after), f"{code}:\n{before}"
