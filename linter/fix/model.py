"""The typed fix a finding may carry: what to change, how sure, in one line."""
from __future__ import annotations

import dataclasses
import enum


class Applicability(enum.Enum):
    """How far a fix can be trusted, as Ruff grades its fixes.

    ``SAFE``: the rewrite keeps what the code does except the race (``--fix`` applies it).
    ``UNSAFE``: it changes locking or needs a schema change the user must add (shown always,
    applied only with ``--unsafe-fixes``).  ``NONE``: no mechanical rewrite; the fix says
    why, and only describes what to do."""

    SAFE = "safe"
    UNSAFE = "unsafe"
    NONE = "none"

    def applies(self, unsafe_fixes: bool) -> bool:
        """Whether ``--fix`` applies a fix of this grade (``unsafe_fixes``: ``--unsafe-fixes``)."""
        return self is Applicability.SAFE or (unsafe_fixes and self is Applicability.UNSAFE)


@dataclasses.dataclass(frozen=True)
class Edit:
    """Replace lines ``start_line`` up to (not including) ``end_line`` (1-based) with
    ``content`` (whole lines, with the file's own line endings).  ``start_line ==
    end_line`` inserts before that line."""

    start_line: int
    end_line: int
    content: str

    def overlaps(self, other: "Edit") -> bool:
        if self == other:
            return False
        if self.start_line == self.end_line or other.start_line == other.end_line:
            return self.start_line < other.end_line and other.start_line < self.end_line \
                or self.start_line == other.start_line
        return self.start_line < other.end_line and other.start_line < self.end_line


@dataclasses.dataclass(frozen=True)
class Fix:
    """A finding's fix: a one-line ``description`` (what the rewrite does, or for
    ``NONE`` why there is none), its ``applicability`` and its ``edits`` (none for
    ``NONE``).  ``note``: what the user must still do by hand (a ``UniqueConstraint`` to
    add in a migration), shown with the fix, never written.  ``kind``: which fixer wrote
    it, for the fix-coverage figures."""

    description: str
    applicability: Applicability
    edits: tuple[Edit, ...] = ()
    note: str = ""
    #: the fixer that wrote it (its module's name: ``counters``, ``user_lock``, ...), "" for none
    kind: str = ""

    @property
    def available(self) -> bool:
        return self.applicability is not Applicability.NONE and bool(self.edits)


def no_fix(why: str) -> Fix:
    return Fix(why, Applicability.NONE)
