"""What a wrapping middleware owes the application it wraps: attribute look-ups.

Applications and their tests inspect a middleware stack by attribute (Flask's
``app.wsgi_app.x_for`` of the ``ProxyFix`` around it, FastAPI's ``app.state``): a
middleware that hides them breaks code that worked before it was added.  So an
attribute a middleware does not have itself is looked up on the application it
wraps (kept as ``__wrapped__``, the name ``functools.wraps`` uses), and so on down.
"""
from __future__ import annotations

from typing import Any


def forwarded_attribute(middleware: object, name: str) -> Any:
    """For ``__getattr__``: ``name`` of the wrapped application.

    Read from the instance's own dictionary: during ``__init__``, copying or
    unpickling ``__wrapped__`` may not be set yet, and asking for it through the
    normal look-up would come back here for ever.
    """
    try:
        wrapped = vars(middleware)["__wrapped__"]
    except KeyError:
        raise AttributeError(f"{type(middleware).__name__!r} object has no attribute {name!r}") from None
    return getattr(wrapped, name)
