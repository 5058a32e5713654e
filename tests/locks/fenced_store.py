"""A tiny transaction-less storage that honours fencing tokens, as a database row would.

One record ``{fence, value, log}`` in a file; each call is one atomic step (``flock`` on a
lock file beside it), and nothing groups a read with the write that follows it -- the
store has no transactions.  A step writes the new record to a temporary file and renames
it over the old one, so a client killed anywhere in a step (the fault suite kills them)
leaves the record whole, before or after the step: rewriting the file in place left it
empty when the kill fell between the truncation and the write, and the next step then
started again from nothing (the fault suite's "lost" writes on a loaded machine).

It remembers the highest fence it has seen and refuses a lower one:

* :meth:`write` -- the classic check (Kleppmann's fencing, Chubby's sequencer):
  refused below the highest fence seen;
* :meth:`claim` -- a read that records its fence first (the sound recipe of
  docs/locks.md): a holder that claimed before reading makes every older
  holder's later write fail.

``log`` keeps every accepted write (fence, operation id, value) so a judge can count lost,
duplicated and unfenced writes afterwards.
"""
from __future__ import annotations

import fcntl
import json
import os
from typing import Any, Callable


class FencedStore:
    def __init__(self, path: str) -> None:
        self.path = path

    def _step(self, fn: Callable[[dict[str, Any]], Any]) -> Any:
        lock = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                with open(self.path, "rb") as f:
                    raw = f.read()
            except FileNotFoundError:
                raw = b""
            state = json.loads(raw) if raw else {"fence": 0, "value": None, "log": []}
            result = fn(state)
            staged = f"{self.path}.{os.getpid()}.new"
            with open(staged, "wb") as f:
                f.write(json.dumps(state).encode())
            os.replace(staged, self.path)      # atomic: the old record or the new, never neither
            return result
        finally:
            os.close(lock)

    def write(self, fence: int, value: Any, op: str | None = None) -> bool:
        """Store ``value`` unless a higher fence was seen; True if accepted."""
        def step(state: dict[str, Any]) -> bool:
            if fence < state["fence"]:
                return False
            state["fence"], state["value"] = fence, value
            state["log"].append([fence, op, value])
            return True
        return self._step(step)

    def claim(self, fence: int) -> tuple[bool, Any]:
        """Record ``fence`` and read the value: (False, None) if a higher fence was seen."""
        def step(state: dict[str, Any]) -> tuple[bool, Any]:
            if fence < state["fence"]:
                return False, None
            state["fence"] = fence
            return True, state["value"]
        return self._step(step)

    def read(self) -> dict:
        """The whole record, without recording anything."""
        with open(self.path) as f:
            return json.load(f)
