"""Process-wide settings of the runtime checker.

One small mutable object rather than scattered globals, so that the Django app,
the pytest plugin and ``txnsafety.configure()`` all change the same thing.
"""
from __future__ import annotations

import fnmatch
import inspect
import logging
import numbers
import os
import sys
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from .context import Priority
from .file_verdicts import forget_file_verdicts

log = logging.getLogger("txnsafety")

MODES = ("raise", "log", "collect")
READ_SITES = ("always", "adaptive", "never")


@dataclass
class Settings:
    """What the checker does.  Change it with :func:`configure`."""

    #: ``raise`` (StompingError at the write), ``log`` (stdlib logging) or
    #: ``collect`` (kept on the request scope only).
    mode: str = "log"
    #: Check models that declare no policy as if they were written in a
    #: transaction or under a lock.
    strict: bool = False
    #: Master switch: off, reads and writes cost one attribute check.
    enabled: bool = True
    #: When to find the user's read site (a walk up the stack to the first user
    #: frame, about a microsecond per library frame, the checker's main cost):
    #: ``always``; ``adaptive`` (the default outside tests: only for models that
    #: already had a violation in this process, so the first report of a model
    #: names no read site and later ones do); ``never``.  Write sites are always found.
    read_sites: str = "adaptive"
    #: ``"Model"`` / ``"app.Model"`` globs, optionally ``"glob:TXN103"``, never reported.
    allow: tuple[str, ...] = ()
    #: Path prefixes of frames that are never "the user's own code".
    library_paths: tuple[str, ...] = ()
    #: Decides a request's lock priority from its path and headers.
    priority_rule: Callable[[str, dict[str, str]], Priority] | None = None
    #: URL path prefixes treated as batch work (cron, task queues).
    batch_paths: tuple[str, ...] = ("/cron/", "/_ah/", "/tasks/")
    #: The share of requests the checker checks, from 0 to 1 (sentry-sdk's
    #: ``traces_sample_rate``): a request left out runs as if the checker were off, its
    #: locks unchanged.  A race shows on every request that runs the racy code, so in
    #: production a sample finds it over time at a fraction of the cost.
    sample_rate: float = 1.0
    #: Decides the share of requests like this one to check, from its method, path and
    #: headers (sentry-sdk's ``traces_sampler``): a number from 0 to 1, True or False, or
    #: None for ``sample_rate``.  Rarely used endpoints checked every time, the hot ones
    #: at a small share: every code path is seen, and the cost stays low where the traffic is.
    sampler: Callable[[str, str, Mapping[str, str]], float | bool | None] | None = None
    #: The level of ``log`` mode's record per report.  Sentry's logging integration makes
    #: WARNING a breadcrumb and ERROR an event: choose ERROR to see reports as issues.
    log_level: int = logging.WARNING
    _allow_compiled: list[tuple[str, str | None]] = field(default_factory=list, repr=False)

    def is_allowed(self, model: str, code: str) -> bool:
        """True when the allowlist silences ``code`` for ``model``."""
        for pattern, only_code in self._allow_compiled:
            if only_code is not None and only_code != code:
                continue
            short = model.rsplit(".", 1)[-1]
            if fnmatch.fnmatchcase(model, pattern) or fnmatch.fnmatchcase(short, pattern):
                return True
        return False

    def priority_for(self, path: str, headers: Mapping[str, str]) -> Priority:
        """Interactive unless the rule (or the header, or a batch path prefix) says batch.

        Never raises: a priority only orders lock waiters, so a rule that fails or a
        header that is missing, empty or malformed is logged and the request runs at
        the default (interactive) priority rather than failing.
        """
        try:
            if self.priority_rule is not None:
                return _as_priority(self.priority_rule(path, headers), "the priority rule returned")
            value = headers.get(PRIORITY_HEADER) if headers is not None else None
            if value and _as_priority(value, f"the {PRIORITY_HEADER} header is") is Priority.BATCH:
                return Priority.BATCH
            if isinstance(path, str) and any(path.startswith(p) for p in self.batch_paths):
                return Priority.BATCH
        except Exception:
            log.exception("txnsafety: the priority rule failed for %r; the request runs at interactive priority",
                          str(path)[:200])
        return Priority.INTERACTIVE

    def rate_for(self, method: str, path: str, headers: Mapping[str, str]) -> float:
        """The share of requests like this one to check: the sampler's answer, else ``sample_rate``.

        Never raises: a sampler that fails or answers something other than a share is
        logged (naming the setting; with its traceback the first time, then once per
        thousand failures, so that a broken sampler is not one Sentry event per request)
        and the request is sampled at ``sample_rate``, as if no sampler were set: a broken
        sampler is never a silent off switch.
        """
        sampler = self.sampler  # once: another thread may change the setting
        if sampler is None:
            return self.sample_rate
        try:
            rate = sampler(method, path, headers)
            if rate is None:
                return self.sample_rate
            if isinstance(rate, bool):
                return 1.0 if rate else 0.0
            if isinstance(rate, numbers.Real) and 0 <= rate <= 1:
                return float(rate)
            problem: BaseException | str = f"it returned {rate!r:.40}, not a share from 0 to 1 (or True, False, None)"
        except Exception as exc:
            problem = exc
        _sampler_failures[0] += 1
        if _sampler_failures[0] % 1000 == 1:
            log.error("txnsafety: the sampler failed for %s %.200s (%d failure(s) so far): %s; the request is "
                      "sampled at sample_rate", method, path, _sampler_failures[0], problem,
                      exc_info=problem if isinstance(problem, BaseException) else None)
        return self.sample_rate


#: Failures of the sampler in this process (its error is logged on the first and every thousandth).
_sampler_failures = [0]


#: The one header the default priority rule reads (lower case).
PRIORITY_HEADER = "x-txnsafety-priority"


def _as_priority(value: object, what: str) -> Priority:
    """``value`` as a Priority (a member or its name in any case), else logged and interactive."""
    if isinstance(value, Priority):
        return value
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if isinstance(value, str):
        try:
            return Priority(value.strip().lower())
        except ValueError:
            pass
    log.warning("txnsafety: %s %.40r, not a priority (batch or interactive); using interactive", what, value)
    return Priority.INTERACTIVE


class ConfigurationError(ValueError):
    """A setting the checker cannot work with; the message names the setting."""


#: The environment variable that sets the mode (over the Django setting and pytest's ini).
MODE_VARIABLE = "TXNSAFETY_MODE"


def mode_from_environment() -> str | None:
    """The mode ``TXNSAFETY_MODE`` asks for, or None when it is unset (or empty).

    An unknown value (``warn``) is an error, never a silent off switch: a mode the
    checker does not know would neither raise nor log.
    """
    value = os.environ.get(MODE_VARIABLE, "").strip()
    if not value:
        return None
    if value not in MODES:
        raise ConfigurationError(
            f"txnsafety: the environment variable {MODE_VARIABLE}={value!r} is not a mode; "
            f"use one of {', '.join(MODES)} (or unset it)")
    return value


def _initial_mode() -> str:
    """The mode at import: ``TXNSAFETY_MODE`` or ``log``; a bad variable stops the import.

    Under pytest the import happens while pytest loads its plugins, where an exception is
    an INTERNALERROR: there the plugin reports it as a usage error instead (it calls
    :func:`mode_from_environment` again in ``pytest_configure``).
    """
    try:
        return mode_from_environment() or "log"
    except ConfigurationError:
        if "_pytest.config" in sys.modules:
            return "log"
        raise


settings = Settings(mode=_initial_mode())


def _compile_allow(allow: Iterable[str]) -> list[tuple[str, str | None]]:
    compiled: list[tuple[str, str | None]] = []
    for entry in allow:
        if not isinstance(entry, str) or not entry.strip():
            raise ConfigurationError(
                f"txnsafety: allow entries are 'ModelGlob' or 'ModelGlob:TXN1nn', not {entry!r}")
        pattern, _, code = entry.partition(":")
        code = code.strip()
        if code and not (code.startswith("TXN") and code[3:].isdigit()):
            raise ConfigurationError(f"txnsafety: {code!r} in allow entry {entry!r} is not a TXN code")
        compiled.append((pattern.strip(), code or None))
    return compiled


def validate(
    *,
    mode: str | None = None,
    read_sites: str | bool | None = None,
    allow: Iterable[str] | None = None,
    priority_rule: object = None,
    log_level: object = None,
    sample_rate: object = None,
    sampler: object = None,
    **_others: object,
) -> None:
    """Raise :class:`ConfigurationError` for what :func:`configure` would refuse, changing nothing.

    The Django system checks call it to report a bad ``TXNSAFETY`` without applying it.
    """
    if mode is not None and mode not in MODES:
        raise ConfigurationError(f"txnsafety: mode must be one of {', '.join(MODES)}, not {mode!r}")
    if read_sites is not None and not isinstance(read_sites, bool) and read_sites not in READ_SITES:
        raise ConfigurationError(
            f"txnsafety: read_sites must be one of {', '.join(READ_SITES)}, not {read_sites!r}")
    if allow is not None:
        if isinstance(allow, str):
            raise ConfigurationError("txnsafety: allow is a list of 'ModelGlob[:TXN1nn]' strings, not one string")
        _compile_allow(allow)
    if log_level is not None:
        _level(log_level)
    if sample_rate is not None:
        _rate(sample_rate)
    if priority_rule is not None and not callable(priority_rule):
        raise ConfigurationError(f"txnsafety: priority_rule must be a callable (path, headers), not {priority_rule!r}")
    if sampler is not None:
        _check_sampler(sampler)


def _check_sampler(sampler: object) -> None:
    """A sampler is called as ``sampler(method, path, headers)``: one that cannot be is an error
    now, not a logged failure on every request (a priority rule's ``(path, headers)`` is the
    likely mix-up)."""
    takes = "a callable (method, path, headers) returning the share of such requests to check"
    if not callable(sampler):
        raise ConfigurationError(f"txnsafety: sampler must be {takes}, not {sampler!r}")
    try:
        signature = inspect.signature(sampler)
    except (TypeError, ValueError):  # no signature to read (some builtins): trust the call
        return
    try:
        signature.bind("GET", "/", {})
    except TypeError as exc:
        raise ConfigurationError(f"txnsafety: sampler must be {takes}; {sampler!r} cannot be called so ({exc})") \
            from exc


def configure(
    *,
    mode: str | None = None,
    strict: bool | None = None,
    enabled: bool | None = None,
    read_sites: str | bool | None = None,
    allow: Iterable[str] | None = None,
    library_paths: Iterable[str] | None = None,
    priority_rule: Callable[[str, dict[str, str]], Priority] | None = None,
    batch_paths: Iterable[str] | None = None,
    log_level: int | str | None = None,
    sample_rate: float | None = None,
    sampler: Callable[[str, str, Mapping[str, str]], float | bool | None] | None = None,
) -> Settings:
    """Change the checker's settings; arguments left ``None`` keep their value.

    Raises :class:`ConfigurationError` (a ``ValueError``) for an unknown mode or a
    malformed allow entry, at configuration time rather than in the middle of a
    request, and then changes nothing.
    """
    if allow is not None:
        allow = tuple(allow)
    validate(mode=mode, read_sites=read_sites, allow=allow, priority_rule=priority_rule, log_level=log_level,
             sample_rate=sample_rate, sampler=sampler)
    if mode is not None:
        settings.mode = mode
    if strict is not None:
        settings.strict = bool(strict)
    if enabled is not None:
        settings.enabled = bool(enabled)
    if read_sites is not None:
        if isinstance(read_sites, bool):
            read_sites = "always" if read_sites else "never"
        settings.read_sites = read_sites
    if allow is not None:
        settings._allow_compiled = _compile_allow(allow)
        settings.allow = allow
    if library_paths is not None:
        settings.library_paths = tuple(library_paths)
        forget_file_verdicts()  # cached per file: classify again
    if priority_rule is not None:
        settings.priority_rule = priority_rule
    if batch_paths is not None:
        settings.batch_paths = tuple(batch_paths)
    if log_level is not None:
        settings.log_level = _level(log_level)
    if sample_rate is not None:
        settings.sample_rate = _rate(sample_rate)
    if sampler is not None:
        settings.sampler = sampler
        _sampler_failures[0] = 0
    return settings


def _rate(value: object) -> float:
    """A share of requests, from 0 to 1."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1:
        return float(value)
    raise ConfigurationError(f"txnsafety: sample_rate must be a number from 0 to 1 (the share of requests "
                             f"checked), not {value!r}")


def _level(value: object) -> int:
    """A logging level from ``logging.ERROR`` or ``"ERROR"``."""
    if isinstance(value, bool):
        value = None
    if isinstance(value, int) and value >= 0:
        return value
    if isinstance(value, str):
        level = logging.getLevelName(value.strip().upper())
        if isinstance(level, int):
            return level
    raise ConfigurationError(f"txnsafety: log_level must be a logging level (e.g. 'ERROR', logging.WARNING), "
                             f"not {value!r}")
