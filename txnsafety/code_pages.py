"""The page of each code (``docs/codes/TXNnnn.md``), readable offline.

``docs/codes/`` in the repository is the single source.  A built wheel carries a copy as
package data in ``txnsafety/code_pages/`` (setup.py's ``build_py`` step copies it); an
editable install or a checkout reads the repository's ``docs/codes/`` directly.
``txnsafety codes TXN102`` prints a page and the SARIF report embeds it as the rule's
``help.markdown``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from .codes import CODES

_PACKAGED = Path(__file__).resolve().parent / "code_pages"
_CHECKOUT = Path(__file__).resolve().parents[1] / "docs" / "codes"


def pages_dir() -> Optional[Path]:
    """Where the pages are: the wheel's copy, else a checkout's ``docs/codes``."""
    for candidate in (_PACKAGED, _CHECKOUT):
        if (candidate / "TXN101.md").is_file():
            return candidate
    return None


def page(code: str) -> Optional[str]:
    """The Markdown page of ``code`` (``TXN102``), None when the code or page is unknown."""
    code = code.strip().upper()
    directory = pages_dir()
    if code not in CODES or directory is None:
        return None
    path = directory / f"{code}.md"
    return path.read_text(encoding="utf-8") if path.is_file() else None
