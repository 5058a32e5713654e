"""A request's headers for a ``sampler``, read only when it asks.

A sampler usually reads the path and at most a header or two, on every request,
including the many it leaves out: decoding every header into a dict first (as the
middlewares do for a ``priority_rule``) is work it mostly does not need.  So the
middlewares hand a sampler these read-only mappings instead: a look-up reads the one
header it names, with a lower-case name, as the dicts have them.
"""
from __future__ import annotations

from typing import Iterable, Iterator, Mapping

#: The two headers a WSGI environ keeps without the ``HTTP_`` prefix (PEP 3333).
_UNPREFIXED = frozenset({"CONTENT_TYPE", "CONTENT_LENGTH"})


class EnvironHeaders(Mapping[str, str]):
    """The headers of a WSGI environ (or Django's ``request.META``), by lower-case name."""

    __slots__ = ("_environ",)

    def __init__(self, environ: Mapping[str, object]) -> None:
        self._environ = environ

    def __getitem__(self, name: str) -> str:
        if not isinstance(name, str):
            raise KeyError(name)
        key = name.upper().replace("-", "_")
        value = self._environ[key if key in _UNPREFIXED else "HTTP_" + key]
        if not isinstance(value, str):
            raise KeyError(name)
        return value

    def __iter__(self) -> Iterator[str]:
        for key, value in self._environ.items():
            if isinstance(value, str) and (key.startswith("HTTP_") or key in _UNPREFIXED):
                yield key.removeprefix("HTTP_").replace("_", "-").lower()

    def __len__(self) -> int:
        return sum(1 for _ in self)


class ASGIHeaders(Mapping[str, str]):
    """The headers of an ASGI scope's ``headers`` list, by lower-case name (the last one of
    a repeated header, as a dict built from the list keeps)."""

    __slots__ = ("_pairs",)

    def __init__(self, pairs: Iterable[tuple[bytes, bytes]]) -> None:
        self._pairs = pairs

    def __getitem__(self, name: str) -> str:
        if not isinstance(name, str):
            raise KeyError(name)
        wanted = name.lower().encode("latin-1", "replace")
        found = None
        for key, value in self._pairs:
            if bytes(key).lower() == wanted:
                found = value
        if found is None:
            raise KeyError(name)
        return bytes(found).decode("latin-1")

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys(bytes(key).decode("latin-1").lower() for key, _ in self._pairs))

    def __len__(self) -> int:
        return sum(1 for _ in self)
