"""The per-file cache of "is this file library code?" verdicts.

Why a module of its own: :mod:`txnsafety.sites` fills the cache on every stack walk
(classifying each file once), and :func:`txnsafety.config.configure` must empty it
when ``library_paths`` changes (a file classified before may now be a library's).
Kept below both, the settings never import the stack walk: imports run one way,
``sites -> config -> file_verdicts``.
"""
from __future__ import annotations

#: filename -> its verdict (true for library code; :data:`txnsafety.sites.BOUNDARY` at a request boundary)
verdicts: dict[str, bool] = {}


def forget_file_verdicts() -> None:
    """Drop cached verdicts (after ``configure(library_paths=...)`` or new request boundaries)."""
    verdicts.clear()
