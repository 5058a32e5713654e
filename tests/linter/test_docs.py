"""Every code has a docs page; each page's bad example is reported and its good one is not."""
from __future__ import annotations

import re
import textwrap

import pytest

from txnsafety.codes import CODES
from txnsafety_lint.analysis import analyze_source
from txnsafety_lint.facts.config import LINTER_CODES, Config

from .helpers import ROOT

DOCS = ROOT / "docs" / "codes"
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def sections(text):
    out = {}
    for part in re.split(r"^## ", text, flags=re.M)[1:]:
        title, _, body = part.partition("\n")
        out[title.strip()] = BLOCK.findall(body)
    return out


def as_function(snippet):
    if re.search(r"^(def|@)", snippet, re.M):
        return snippet
    return "def _snippet(pk, name, session, pid):\n" + textwrap.indent(snippet, "    ")


@pytest.mark.parametrize("code", sorted(CODES))
def test_page_exists(code):
    page = DOCS / f"{code}.md"
    text = page.read_text()
    assert text.startswith(f"# {code}")
    assert CODES[code].kind in text.splitlines()[0]
    assert re.search(r"\bBad\b", text) and re.search(r"\bGood\b", text) and "Fix" in text


@pytest.mark.parametrize("code", LINTER_CODES)
def test_examples(code):
    parts = sections((DOCS / f"{code}.md").read_text())
    cfg = Config().update({"enable": ["TXN109"], "gets": ["get_user"]})
    assert parts.get("Bad"), code
    for snippet in parts["Bad"]:
        got = {f.code for f in analyze_source(as_function(snippet), cfg)}
        assert code in got, f"{code} bad example not reported:\n{snippet}"
    for snippet in parts.get("Good", []):
        got = {f.code for f in analyze_source(as_function(snippet), cfg)}
        assert code not in got, f"{code} good example reported:\n{snippet}"


def test_linter_page_lists_every_code():
    text = (ROOT / "docs" / "linter.md").read_text()
    for code in CODES:
        assert code in text
