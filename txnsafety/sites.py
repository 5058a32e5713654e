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
from contextvars import ContextVar
from typing import Any, Iterator, NamedTuple

from .config import settings
from .file_verdicts import forget_file_verdicts, verdicts as _verdicts

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _library_roots() -> tuple[str, ...]:
    roots = {_PACKAGE_DIR + os.sep}
    # "scripts": console scripts (bin/pytest, bin/gunicorn, bin/django-admin) are the
    # entry points of installed packages, not the application's code
    for key in ("stdlib", "platstdlib", "purelib", "platlib", "scripts"):
        path = sysconfig.get_paths().get(key)
        if path:
            roots.add(os.path.abspath(path) + os.sep)
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix}:  # a venv's and its base's bin/
        roots.add(os.path.join(os.path.abspath(prefix), "Scripts" if os.name == "nt" else "bin") + os.sep)
    roots.add(os.path.dirname(os.path.abspath(sys.executable)) + os.sep)
    for path in sys.path:
        if path.endswith(("site-packages", "dist-packages")):
            roots.add(os.path.abspath(path) + os.sep)
    return tuple(sorted(roots))


_ROOTS = _library_roots()


def is_library_file(filename: str, module_globals: dict | None = None) -> bool:
    """True for the stdlib, installed packages, txnsafety itself and configured paths.

    A data layer of the application's own marks itself as library code with a
    module-level ``__txnsafety_library__ = True``, so that sites point at its callers.
    The verdict of a file at a request boundary (:func:`register_boundaries`) is
    :data:`BOUNDARY`, which is true as well.
    """
    verdict = _verdicts.get(filename)
    if verdict is None:
        path = ""
        if module_globals is not None and module_globals.get("__txnsafety_library__"):
            verdict = True
        elif filename.startswith("<") and filename != "<stdin>":
            verdict = True  # <frozen ...>, <string>, generated code
        else:
            path = os.path.abspath(filename)
            # An editable install of a library lives outside site-packages; the
            # tests of txnsafety itself are user code.
            verdict = path.startswith(_ROOTS) or path.startswith(settings.library_paths or ("\0",))
        if verdict and _boundaries and (path or os.path.abspath(filename)).startswith(_boundaries):
            verdict = BOUNDARY
        if len(_verdicts) < 10_000:
            _verdicts[filename] = verdict
    return verdict


#: The verdict of library files a request crosses between the server and the application
#: (a framework's request handler, its test client): a user frame found beyond one of them
#: is a middleware or a test's client call, not the code that read.
BOUNDARY: Any = 2
_boundaries: tuple[str, ...] = ()
#: The data layer's own files (an ORM): the library's call a site names instead of a
#: user frame beyond a boundary is the first frame past them.
_data_layer: tuple[str, ...] = ()


def register_boundaries(boundaries: tuple[str, ...], data_layer: tuple[str, ...]) -> None:
    """An integration names its framework's request boundaries and its ORM's files (path prefixes)."""
    global _boundaries, _data_layer
    _boundaries = tuple(sorted(set(_boundaries) | set(boundaries)))
    _data_layer = tuple(sorted(set(_data_layer) | set(data_layer)))
    forget_file_verdicts()


class Site(NamedTuple):
    """A place in the user's code: ``file:line in function``.

    A named tuple because one is made on every checked read and write.
    """

    file: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line} in {self.function}"


#: Where the awaiting coroutine stood when a ``sync_to_async`` hop started: the
#: thread that runs the sync part has no user frame of its own (see hops.py).
caller_site: ContextVar[Site | None] = ContextVar("txnsafety_caller_site", default=None)
#: The awaiting user frame itself (the same hop), for questions about the line's code
#: (:mod:`txnsafety.limits`: is a count compared with a limit?).
caller_frame: ContextVar[Any] = ContextVar("txnsafety_caller_frame", default=None)
#: The frames from the awaiting one outward, taken when the hop started: a suspended
#: coroutine's ``f_back`` is None, so the thread could not climb past the awaiting frame
#: to the coroutines awaiting *it* (a helper coroutine's caller; TXN105's extent).
caller_chain: ContextVar[tuple[Any, ...]] = ContextVar("txnsafety_caller_chain", default=())


def user_site(skip: int = 1) -> Site | None:
    """The innermost frame of user code above the caller (cheap: no formatting).

    This runs on every checked read, so the loop is written for speed: one dict
    lookup per frame, the classification done once per file.  When the stack
    holds no user frame — the ORM runs in a greenlet (SQLAlchemy asyncio) or in a
    ``sync_to_async`` thread (Django's async ORM) — the walk continues in the
    parent greenlet's suspended stack, then falls back to the awaiting caller.
    """
    try:
        frame: Any = sys._getframe(skip + 1)
    except ValueError:
        return None
    return site_from(frame)


def user_frame(skip: int = 1) -> Any:
    """The innermost user frame above the caller (across greenlet and ``sync_to_async``
    hops, like :func:`user_site`), or None."""
    try:
        frame: Any = sys._getframe(skip + 1)
    except ValueError:
        return None
    found = _first_user_frame(frame)
    return found if found is not None else caller_frame.get()


def _first_user_frame(frame: Any, past_boundary: bool = False) -> Any:
    """The innermost frame of user code from ``frame`` outwards, across greenlets, or None.

    With ``past_boundary``, a walk that crosses a request boundary (:data:`BOUNDARY`)
    before any user frame returns the library's own call instead (:func:`_library_caller`):
    the user frame beyond it is a middleware that only passed the request on.
    """
    verdicts = _verdicts
    for segment in _segments(frame):
        frame = segment
        while frame is not None:
            code = frame.f_code
            verdict = verdicts.get(code.co_filename)
            if verdict is None:
                verdict = is_library_file(code.co_filename, frame.f_globals)
            if not verdict:
                return frame
            if verdict is BOUNDARY and past_boundary:
                return _library_caller(segment)
            frame = frame.f_back
    return None


def _library_caller(frame: Any) -> Any:
    """The first frame from ``frame`` outwards past txnsafety's and the data layer's own:
    the library code that made the query (a generic view's ``get_object``)."""
    skip = (_PACKAGE_DIR + os.sep,) + _data_layer
    start = frame
    while frame is not None:
        if not os.path.abspath(frame.f_code.co_filename).startswith(skip):
            return frame
        frame = frame.f_back
    return start


def frames_here(skip: int = 1) -> Iterator[Any]:
    """Every frame above the caller, then each parent greenlet's, then the coroutine
    awaiting a ``sync_to_async`` hop (for rare questions: no caching, no speed)."""
    try:
        frame: Any = sys._getframe(skip + 1)
    except ValueError:
        return
    yield from frames_from(frame)


def frames_from(frame: Any) -> Iterator[Any]:
    """:func:`frames_here` from ``frame``."""
    for segment in _segments(frame):
        frame = segment
        while frame is not None:
            yield frame
            frame = frame.f_back
    yield from outward(caller_frame.get())


def site_past(frame: Any, instance: Any, methods: frozenset[str]) -> Site | None:
    """The first user frame from ``frame`` outwards (then the frames awaiting a
    ``sync_to_async`` hop) that is not one of ``instance``'s own ``methods``: a model's
    override calling ``super().refresh_from_db()`` is not the user's call that read."""
    library: Any = None  # the first library frame past the data layer (a form's save())
    skip = (_PACKAGE_DIR + os.sep,) + _data_layer
    for found in frames_from(frame):
        code = found.f_code
        if code.co_name in methods and found.f_locals.get("self") is instance:
            continue
        verdict = is_library_file(code.co_filename, found.f_globals)
        if not verdict:
            return Site(code.co_filename, found.f_lineno, code.co_name)
        if library is None and not os.path.abspath(code.co_filename).startswith(skip):
            library = found
        if verdict is BOUNDARY and library is not None:  # beyond it: a middleware (see site_from)
            return Site(library.f_code.co_filename, library.f_lineno, library.f_code.co_name)
    return None


def outward(frame: Any) -> Iterator[Any]:
    """``frame`` and the frames that called it, outermost last.  For the awaiting frame of a
    ``sync_to_async`` hop (suspended: no ``f_back``) the chain taken when the hop began."""
    if frame is None:
        return
    chain = caller_chain.get()
    if chain and chain[0] is frame:
        yield from chain
        return
    while frame is not None:
        yield frame
        frame = frame.f_back


def site_from(frame: Any) -> Site | None:
    """:func:`user_site`, starting at ``frame`` (a caller's frame kept for later).

    Library code reached through the request handler (a third-party or generic view)
    names its own call rather than the user's middleware above it."""
    found = _first_user_frame(frame, True)
    if found is None:
        return caller_site.get()
    return Site(found.f_code.co_filename, found.f_lineno, found.f_code.co_name)


#: Models whose reads get a site under ``read_sites="adaptive"``: those that had a violation.
sites_wanted: set[type] = set()


def wants_site(model: type) -> bool:
    """Whether reads and writes of ``model`` are located now (the ``read_sites`` setting).

    Hot paths ask it only when ``sites_wanted or settings.read_sites == "always"``
    (written out where they are, to spare a call): until a model has had a
    violation, no read is located.
    """
    mode = settings.read_sites
    return mode == "always" or (mode == "adaptive" and model in sites_wanted)


def _segments(frame: Any) -> Iterator[Any]:
    """The innermost frame of each stack to search: this one, then each parent greenlet's.

    SQLAlchemy's asyncio extension runs the sync ORM in a greenlet
    (``greenlet_spawn``): the user's ``await session.get(...)`` is in the parent
    greenlet's suspended stack, not above the ORM's frames.  Each greenlet is
    visited once, so the walk always ends.
    """
    yield frame
    greenlet = sys.modules.get("greenlet")
    if greenlet is None:
        return
    try:
        current = greenlet.getcurrent().parent
        while current is not None:
            if current.gr_frame is not None:
                yield current.gr_frame
            current = current.parent
    except Exception:  # a greenlet API change must not break a read
        return


def _stack(frame: Any) -> list[traceback.FrameSummary]:
    """``traceback.extract_stack`` across greenlet hops (outermost first)."""
    stack: list[traceback.FrameSummary] = []
    for segment in _segments(frame):
        stack = traceback.extract_stack(segment) + stack
    return stack


def user_trace(skip: int = 1, limit: int = 12, frame: Any = None) -> str:
    """The user frames of the current stack (from ``frame`` if given), formatted (for a violation report)."""
    frames = [f for f in _stack(frame if frame is not None else sys._getframe(skip + 1))
              if not _verdicts.get(f.filename, False) and not is_library_file(f.filename)]
    return "".join(traceback.format_list(frames[-limit:]))
