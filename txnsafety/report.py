"""Violations and where they go: raise, log or collect.

A violation names the code, the model, the key and the user's own sites — never a
field value, because rows hold personal data and reports end up in log
aggregators.  Reports are deduplicated per request (a loop that stomps 1,000 rows
from one line reports once), can be silenced with a reason, and reach any
listeners (the pytest plugin) even when raised inside a server thread.
"""
from __future__ import annotations

import logging
import os
import sys
import threading
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, Mapping

from .codes import CODES, Code
from .config import settings
from .context import current_scope, test_code_scope
from .sites import Site

log = logging.getLogger("txnsafety")


@dataclass(frozen=True)
class Violation:
    """One stomping hazard, as both halves of txnsafety describe it."""

    code: Code
    message: str
    model: str
    key: str | None
    read_site: Site | None = None
    write_site: Site | None = None
    other_write_site: Site | None = None
    detail: Mapping[str, str] = field(default_factory=dict)
    trace: str = ""
    request_id: str = ""
    #: Made by a test's own code outside any request (the pytest plugin's scope of the test:
    #: the test body, a unittest ``setUp``), not by a request the test made.
    outside_request: bool = False

    @property
    def kind(self) -> str:
        return self.code.kind

    def dedupe_key(self) -> tuple[object, ...]:
        return (self.code, self.model, self.read_site, self.write_site, self.other_write_site)

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form (``log`` mode puts it in the record's ``extra``)."""
        return {
            "code": self.code.value,
            "kind": self.kind,
            "message": self.message,
            "model": self.model,
            "key": self.key,
            "read_site": str(self.read_site) if self.read_site else None,
            "write_site": str(self.write_site) if self.write_site else None,
            "other_write_site": str(self.other_write_site) if self.other_write_site else None,
            "detail": dict(self.detail),
            "request_id": self.request_id,
            "outside_request": self.outside_request,
        }

    def __str__(self) -> str:
        lines = [f"{self.code.value} {self.kind}: {self.message}",
                 f"  model {self.model}, key {self.key}"]
        if self.read_site:
            lines.append(f"  read at  {self.read_site}")
        if self.write_site:
            lines.append(f"  write at {self.write_site}")
        if self.other_write_site:
            lines.append(f"  other write at {self.other_write_site}")
        for name, value in self.detail.items():
            lines.append(f"  {name}: {value}")
        if self.outside_request:
            lines.append("  made by the test's own code, outside any request")
        if self.trace:
            lines.append("  user stack at the write:")
            lines.extend("    " + line for line in self.trace.rstrip().splitlines())
        return "\n".join(lines)


_model_names: dict[type, str] = {}


def model_name(model: type) -> str:
    """``module.QualName`` (Django models: ``app_label.Model``); cached per class.

    The name a :class:`Violation` gives its model.  It lives with the violation so that
    both the reads that report (:mod:`txnsafety.stamps`, TXN108) and the judgement of
    writes (:mod:`txnsafety.judgement`) name models alike without importing each other.
    """
    name = _model_names.get(model)
    if name is None:
        label = getattr(getattr(model, "_meta", None), "label", None)
        name = label if isinstance(label, str) else f"{model.__module__}.{model.__qualname__}"
        _model_names[model] = name
    return name


class StompingError(Exception):
    """Raised at the write in ``raise`` mode (the default under pytest)."""

    def __init__(self, violation: Violation) -> None:
        super().__init__(str(violation))
        self.violation = violation


# -- suppression --------------------------------------------------------------

_suppressed: ContextVar[tuple[tuple[frozenset[str] | None, str], ...]] = ContextVar(
    "txnsafety_suppressed", default=())


@contextmanager
def suppress(*codes: str, reason: str) -> Iterator[None]:
    """Silence ``codes`` (all codes when none given) inside the block.

    The reason is mandatory: a suppression without one is how legacy hazards
    become permanent.  It is logged at DEBUG with every silenced report.
    """
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError("txnsafety.suppress() needs a reason, e.g. reason='nightly job, single writer'")
    for code in codes:
        if code not in CODES:
            raise ValueError(f"txnsafety.suppress(): unknown code {code!r}")
    token = _suppressed.set(_suppressed.get() + ((frozenset(codes) or None, reason),))
    try:
        yield
    finally:
        _suppressed.reset(token)


def in_test() -> bool:
    """True while a test suite runs: pytest runs a test, a txnsafety test integration is
    active, or Django's test runner has set up its test environment (``manage.py test``
    with any runner: ``mail.outbox`` exists exactly while it is set up)."""
    if "PYTEST_CURRENT_TEST" in os.environ or _test_mode.is_set():
        return True
    mail = sys.modules.get("django.core.mail")
    return mail is not None and hasattr(mail, "outbox")


def test_plugin_active() -> bool:
    """True when txnsafety's pytest plugin runs this process (it then owns the mode)."""
    return _test_mode.is_set()


_test_mode = threading.Event()


@contextmanager
def suppress_in_test(*codes: str, reason: str) -> Iterator[None]:
    """Like :func:`suppress`, but refuses to run outside a test run.

    For test factories and fixtures that build data in ways production never
    does; production code that calls it fails loudly instead of going quiet.
    """
    if not in_test():
        raise RuntimeError("txnsafety.suppress_in_test() may only be used while tests run")
    with suppress(*codes, reason=reason):
        yield


def _suppression_reason(code: Code) -> str | None:
    for codes, reason in reversed(_suppressed.get()):
        if codes is None or code.value in codes:
            return reason
    return None


# -- dispatch -------------------------------------------------------------------

_listeners: list[Callable[[Violation], None]] = []
_listeners_lock = threading.Lock()


def add_listener(fn: Callable[[Violation], None]) -> None:
    """Call ``fn`` with every violation reported in this process (any thread)."""
    with _listeners_lock:
        _listeners.append(fn)


def remove_listener(fn: Callable[[Violation], None]) -> None:
    with _listeners_lock:
        if fn in _listeners:
            _listeners.remove(fn)


def report(violation: Violation) -> None:
    """Deliver ``violation`` according to the configured mode.

    Returns quietly when the violation is allowlisted, suppressed or already
    reported from the same sites in this request.  In ``raise`` mode raises
    :class:`StompingError`; that is the only exception the checker lets out.
    """
    if settings.is_allowed(violation.model, violation.code.value):
        return
    reason = _suppression_reason(violation.code)
    if reason is not None:
        log.debug("txnsafety: %s suppressed (%s)", violation.code.value, reason)
        return
    scope = current_scope()
    quiet = None
    if scope is not None:
        key = violation.dedupe_key()
        with scope._lock:
            if key in scope.reported:
                return
            scope.reported.add(key)
        quiet = test_code_scope(scope.token)
        if quiet is not None and not violation.outside_request:
            violation = replace(violation, outside_request=True)
        with scope._lock:
            scope.violations.append(violation)
    for listener in list(_listeners):
        try:
            listener(violation)
        except Exception:
            log.exception("txnsafety: violation listener failed")
    if quiet:
        return  # a test's own code, quiet (the pytest plugin's --txnsafety-outside-requests): counted, not raised
    mode = settings.mode
    if mode == "raise":
        raise StompingError(violation)
    if mode == "log":
        log_violation(violation)


def log_violation(violation: Violation, level: int | None = None) -> None:
    """One record on the ``txnsafety`` logger for ``violation``.

    Made for the tools that read records: the message *template* is
    ``"TXN102 unprotected: %s"`` (Sentry groups events by template, so each code is
    its own issue), the record's ``pathname``/``lineno``/``funcName`` are the
    user's write site (not this module), and ``extra["txnsafety"]`` holds the
    report as a dict.  The formatted message is ``str(violation)``.
    """
    level = settings.log_level if level is None else level
    if not log.isEnabledFor(level):
        return
    head = f"{violation.code.value} {violation.kind}: "
    text = str(violation)
    site = violation.write_site or violation.read_site
    path, line, function = (site.file, site.line, site.function) if site else ("(unknown file)", 0, None)
    record = log.makeRecord(log.name, level, path, line, head.replace("%", "%%") + "%s",
                            (text[len(head):] if text.startswith(head) else text,), None, func=function,
                            extra={"txnsafety": violation.as_dict()})
    log.handle(record)
