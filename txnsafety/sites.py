"""Where in the *user's* code a read or a write happened.

A read runs on every query of a production app, so it must not walk or format the
whole stack.  :func:`user_site` climbs frames with ``sys._getframe`` and stops at
the first one whose file is not a library's, classifying each file once and
caching the verdict.  The full trace (:func:`user_trace`) is built only when a
violation is reported.
"""
from __future__ import annotations

import os
import sys
import sysconfig
import traceback
from typing import NamedTuple

from .config import settings

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _library_roots() -> tuple[str, ...]:
    roots = {_PACKAGE_DIR + os.sep}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            roots.add(os.path.abspath(path) + os.sep)
    for path in sys.path:
        if path.endswith(("site-packages", "dist-packages")):
            roots.add(os.path.abspath(path) + os.sep)
    return tuple(sorted(roots))


_ROOTS = _library_roots()
_verdicts: dict[str, bool] = {}


def is_library_file(filename: str, module_globals: dict | None = None) -> bool:
    """True for the stdlib, installed packages, txnsafety itself and configured paths.

    A data layer of the application's own marks itself as library code with a
    module-level ``__txnsafety_library__ = True``, so that sites point at its callers.
    """
    verdict = _verdicts.get(filename)
    if verdict is None:
        if module_globals is not None and module_globals.get("__txnsafety_library__"):
            verdict = True
        elif filename.startswith("<") and filename != "<stdin>":
            verdict = True  # <frozen ...>, <string>, generated code
        else:
            path = os.path.abspath(filename)
            # An editable install of a library lives outside site-packages; the
            # tests of txnsafety itself are user code.
            verdict = path.startswith(_ROOTS) or path.startswith(settings.library_paths or ("\0",))
        if len(_verdicts) < 10_000:
            _verdicts[filename] = verdict
    return verdict


def forget_file_verdicts() -> None:
    """Drop cached verdicts (after ``configure(library_paths=...)``)."""
    _verdicts.clear()


class Site(NamedTuple):
    """A place in the user's code: ``file:line in function``.

    A named tuple because one is made on every checked read and write.
    """

    file: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line} in {self.function}"


def user_site(skip: int = 1) -> Site | None:
    """The innermost frame of user code above the caller (cheap: no formatting).

    This runs on every checked read, so the loop is written for speed: one dict
    lookup per frame, the classification done once per file.
    """
    try:
        frame = sys._getframe(skip + 1)
    except ValueError:
        return None
    verdicts = _verdicts
    while frame is not None:
        code = frame.f_code
        verdict = verdicts.get(code.co_filename)
        if verdict is None:
            verdict = is_library_file(code.co_filename, frame.f_globals)
        if not verdict:
            return Site(code.co_filename, frame.f_lineno, code.co_name)
        frame = frame.f_back or _bridged_frame(frame)
    return None


def _bridged_frame(frame: object) -> object | None:
    """Where the caller waits, when the stack ends at a greenlet's first frame.

    SQLAlchemy's asyncio extension runs the sync ORM in a greenlet (greenlet_spawn):
    the user's ``await session.get(...)`` is in the parent greenlet's suspended
    stack, not above the ORM's frames.  Followed once per greenlet hop.
    """
    greenlet = sys.modules.get("greenlet")
    if greenlet is None:
        return None
    try:
        current = greenlet.getcurrent()
        while current is not None and current.parent is not None:
            outer = current.parent.gr_frame
            if outer is not None and frame is not outer:
                return outer
            current = current.parent
    except Exception:
        return None
    return None


def _stack(frame: object) -> list[traceback.FrameSummary]:
    """``traceback.extract_stack`` across greenlet hops (outermost first)."""
    stack = traceback.extract_stack(frame)  # type: ignore[arg-type]
    greenlet = sys.modules.get("greenlet")
    if greenlet is not None:
        try:
            current = greenlet.getcurrent()
            while current.parent is not None and current.parent.gr_frame is not None:
                stack = traceback.extract_stack(current.parent.gr_frame) + stack
                current = current.parent
        except Exception:
            pass
    return stack


def user_trace(skip: int = 1, limit: int = 12) -> str:
    """The user frames of the current stack, formatted (for a violation report)."""
    frames = [f for f in _stack(sys._getframe(skip + 1))
              if not _verdicts.get(f.filename, False) and not is_library_file(f.filename)]
    return "".join(traceback.format_list(frames[-limit:]))
