"""The tune half and the test half of the corpora: a fixed split nobody chooses.

An analysis changed while looking at its corpus is tuned to that corpus (issue 31):
its figures there say little about code nobody has read.  So each corpus is split
once, by a rule that does not depend on the entries' contents or on who looks: the
first byte of the SHA-256 of a bug's ``id`` (or of a precision project's PyPI
``name``), even for the tune half, odd for the test half.  The same key lands in the
same half on every machine and in every Python run (unlike ``hash()``, which is
salted per process).  Work on the analysis reads the tune half only; the test half
is scored once, at the end, and reported on its own.
"""
from __future__ import annotations

import enum
import hashlib


class Half(str, enum.Enum):
    TUNE = "tune"
    TEST = "test"


def half_of(key: str) -> Half:
    """The half ``key`` (a bug id, a project's PyPI name) belongs to, forever."""
    first_byte = hashlib.sha256(key.encode("utf-8")).digest()[0]
    return Half.TUNE if first_byte % 2 == 0 else Half.TEST
