"""The fix model: applicability, line edits read back from a rewrite, edits of several fixes
applied together, and the text report's ``[*]`` mark (nothing else of the output changes)."""
from __future__ import annotations

from txnsafety_lint.facts.model import Finding
from txnsafety_lint.fix.edits import apply_edits, line_edits, select, split_lines
from txnsafety_lint.fix.model import Applicability, Edit, Fix, no_fix
from txnsafety_lint.report.formats import text


def test_applicability_follows_ruff():
    assert Applicability.SAFE.applies(unsafe_fixes=False)
    assert not Applicability.UNSAFE.applies(unsafe_fixes=False)
    assert Applicability.UNSAFE.applies(unsafe_fixes=True)
    assert not Applicability.NONE.applies(unsafe_fixes=True)
    assert not no_fix("why").available
    assert Fix("d", Applicability.SAFE, (Edit(1, 2, "x\n"),)).available


def test_split_lines_keeps_every_ending_and_only_python_line_ends():
    assert split_lines("a\r\nb\rc\nd") == ["a\r\n", "b\r", "c\n", "d"]
    assert split_lines("a\x0cb\n") == ["a\x0cb\n"]          # a form feed ends no line


def test_line_edits_round_trip_keeps_crlf_and_a_missing_last_newline():
    old = "a = 1\r\nb = 2\r\nc = 3"
    new = "a = 1\r\nb = 20\r\nx = 0\r\nc = 3"
    edits = line_edits(old, new)
    assert edits == (Edit(2, 3, "b = 20\r\nx = 0\r\n"),)
    assert apply_edits(old, edits) == new


def test_select_skips_overlaps_and_shares_an_equal_edit():
    shared = Edit(1, 1, "import x\n")
    first = Fix("a", Applicability.SAFE, (shared, Edit(3, 4, "a\n")))
    second = Fix("b", Applicability.SAFE, (shared, Edit(6, 7, "b\n")))
    clash = Fix("c", Applicability.SAFE, (Edit(3, 5, "c\n"),))
    chosen, edits = select([first, clash, second])
    assert chosen == [first, second]
    assert edits.count(shared) == 1
    text_in = "".join(f"{i}\n" for i in range(1, 8))
    assert apply_edits(text_in, edits) == "import x\n1\n2\na\n4\n5\nb\n7\n"


def test_inserts_at_one_line_overlap_but_not_a_neighbour():
    assert Edit(3, 3, "x\n").overlaps(Edit(3, 3, "y\n"))
    assert not Edit(3, 3, "x\n").overlaps(Edit(4, 5, "y\n"))
    assert Edit(2, 4, "x\n").overlaps(Edit(3, 3, "y\n"))


def test_text_marks_only_the_fixable_findings():
    a = Finding(3, 4, "TXN106", "TXN106 lost-update counter: a", path="m.py")
    b = Finding(9, 0, "TXN101", "TXN101 half-protected: b", path="m.py")
    plain = text([a, b])
    assert text([a, b], fixable=()) == plain           # no fixes: byte for byte as before
    marked = text([a, b], fixable={a})
    assert marked.splitlines()[0].startswith("m.py:3:5: TXN106 [*] lost-update counter: a")
    assert marked.splitlines()[1] == plain.splitlines()[1]
    assert "[*]" in text([a], color=True, fixable={a})
