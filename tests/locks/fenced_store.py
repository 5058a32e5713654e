"""A tiny storage that honours fencing tokens, as a database row would.

It keeps the highest fence it has accepted and refuses writes that carry a lower
one (Kleppmann's fencing, Chubby's sequencer check).  A file with ``flock`` makes
the check-and-write atomic across processes.
"""
from __future__ import annotations

import fcntl
import json
import os


class FencedStore:
    def __init__(self, path: str) -> None:
        self.path = path

    def write(self, fence: int, value: str) -> bool:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            raw = os.read(fd, 65536)
            state = json.loads(raw) if raw else {"fence": 0, "value": None}
            if fence < state["fence"]:
                return False
            data = json.dumps({"fence": fence, "value": value}).encode()
            os.lseek(fd, 0, os.SEEK_SET)
            os.ftruncate(fd, 0)
            os.write(fd, data)
            return True
        finally:
            os.close(fd)

    def read(self) -> dict:
        with open(self.path) as f:
            return json.load(f)
