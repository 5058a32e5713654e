"""``redis://`` / ``rediss://``: atomic Lua scripts, per-key fencing counter, BLPOP wake-ups.

Why not redis-py's ``Lock``: it polls every 0.1 s (a waiter learns of a release
up to 100 ms late, and polling starves unlucky clients) and has no fencing or
priorities.  Here each waiter blocks in ``BLPOP`` on its own signal list, its
claiming ACQUIRE sent in the same write (:mod:`.redis_wait`); the releaser hands
the lock to the head waiter inside the release script and pushes that list, the
server runs the claim right after, and nobody can barge in between wake-up and
claim.  A handoff costs the waiter one round trip and one wake-up.  A bounded
re-check (``recheck`` seconds, default 1, or the holder's remaining lease if
shorter) covers a holder that died without releasing.  No KEYS/SCAN anywhere;
all keys of one lock share a hash tag.

URL query options (removed before the URL reaches redis-py): ``prefix``
(default ``txnsafety``), ``recheck`` (seconds, default 1.0), ``claim`` (seconds a
waiter handed the lock has to claim it, default 1.0: a waiter killed while queued
delays the others by at most this plus ``recheck``), ``timeout`` (connect and
socket timeout in seconds, default 5: what one call to a stalled server costs).
"""
from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import time
import weakref
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis
import redis.asyncio
import redis.asyncio.retry
import redis.retry
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError

from ..context import Priority
from . import redis_scripts as lua
from . import redis_topology as topology
from . import redis_wait
from .backend import AcquireRequest, Backend, Grant, HeldLock
from .errors import BackendUnavailable, LockTimeout

_OURS = ("prefix", "recheck", "claim", "timeout", "sentinel_password")
log = logging.getLogger("txnsafety.locks")


def _split_url(url: str) -> tuple[str, dict[str, str]]:
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    ours = {k: v for k, v in query if k in _OURS}
    rest = [(k, v) for k, v in query if k not in _OURS]
    return urlunsplit(parts._replace(query=urlencode(rest))), ours


def _cancelling() -> int:
    task = asyncio.current_task()
    return task.cancelling() if task is not None else 0


def _resurface_cancel(before: int) -> None:
    """Raise CancelledError if a cancel arrived during a redis.asyncio call and was lost.

    redis.asyncio can complete a command and return normally although the task
    was cancelled meanwhile (seen with redis-py 8.1 on Python 3.11): the task's
    ``cancelling()`` count went up but no CancelledError came out.  A waiter that
    swallowed its cancellation would go on to hold the lock for a caller that is
    gone, so we re-raise it.
    """
    if _cancelling() > before:
        raise asyncio.CancelledError()


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class RedisBackend(Backend):
    """See the module docstring."""

    scheme = "redis"

    def __init__(self, url: str, *, client: redis.Redis | None = None) -> None:
        super().__init__(url)
        self._redis_url, ours = _split_url(url)
        self.prefix = ours.get("prefix", "txnsafety")
        self.recheck = float(ours.get("recheck", "1.0"))
        # connect and socket timeout: a stalled server costs at most this per call
        self.timeout = float(ours.get("timeout", "5"))
        if self.timeout <= 0:
            raise ValueError("txnsafety: redis timeout must be positive")
        # how long a waiter handed the lock has to claim it (a dead waiter costs this much)
        self.claim_ms = int(float(ours.get("claim", "1.0")) * 1000)
        # a waiter that has not refreshed its queue entry for this long is dead
        self.alive_ms = int((self.recheck * 2 + 2) * 1000)
        self.topology = topology.parse(self._redis_url, ours)
        self.client = client or topology.sync_client(self.topology, self._client_options(redis.retry))
        # this backend's constants are baked into the script text (fewer ARGV per call)
        self._scripts = tuple(lua.render(text, self.alive_ms, self.claim_ms,
                                         int(self.recheck * 1000))
                              for text in (lua.ACQUIRE, lua.RELEASE, lua.EXTEND, lua.CANCEL))
        self._s_acquire, self._s_release, self._s_extend, self._s_cancel = (
            self.client.register_script(text) for text in self._scripts)
        self._async: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any]" = weakref.WeakKeyDictionary()
        self._keycache: dict[str, tuple[list[str], str]] = {}
        # backend_key -> the five keys as bytes (redis-py sends bytes as they are), encoded
        # by the client's own encoder so the bytes are exactly what it would have sent
        self._encode = self.client.get_encoder().encode
        self._wirecache: dict[str, tuple[bytes, ...]] = {}
        # lock keys whose last acquire here had to wait (see _was_contended)
        self._contended: set[str] = set()

    @functools.cached_property
    def name(self) -> str:
        """The URL without credentials (all hosts of a Sentinel or Cluster URL)."""
        return self.topology.name

    def _client_options(self, retry_module: Any) -> dict[str, Any]:
        """Bounded timeouts and no automatic retries (redis-py's defaults may change).

        A retried release whose first reply was lost finds the lock already gone
        and would look like a lost lease (a stomp); a retried acquire could hold
        the lock past its caller's timeout.  The lock service decides instead:
        an error is reported at once, a release in doubt as in doubt.
        """
        return {"retry": retry_module.Retry(NoBackoff(), 0), "retry_on_timeout": False,
                "socket_timeout": self.timeout, "socket_connect_timeout": self.timeout}

    # -- key naming ------------------------------------------------------------------
    def keys_for(self, backend_key: str) -> tuple[list[str], str]:
        """([lock, fence, queue_i, queue_b, waiters], signal_prefix) for a lock key.

        The hash tag is the key itself when it is safe inside ``{...}``, else its
        SHA-256: every key of one lock then lands in one cluster slot.
        """
        hit = self._keycache.get(backend_key)
        if hit is not None:
            return hit
        if backend_key and "{" not in backend_key and "}" not in backend_key and len(backend_key) <= 200:
            tag = backend_key
        else:
            tag = "#" + hashlib.sha256(backend_key.encode("utf-8", "surrogatepass")).hexdigest()
        base = f"{self.prefix}:{{{tag}}}:"
        value = ([base + "lock", base + "fence", base + "qi", base + "qb", base + "w"], base + "s:")
        if len(self._keycache) > 10000:
            self._keycache.clear()
        self._keycache[backend_key] = value
        return value

    def _wire(self, backend_key: str) -> tuple[bytes, ...]:
        """The keys of :meth:`keys_for`, encoded once per lock key."""
        hit = self._wirecache.get(backend_key)
        if hit is None:
            hit = tuple(map(self._encode, self.keys_for(backend_key)[0]))
            if len(self._wirecache) > 10000:
                self._wirecache.clear()
            self._wirecache[backend_key] = hit
        return hit

    def _aclient(self) -> Any:
        loop = asyncio.get_running_loop()
        entry = self._async.get(loop)
        if entry is None:
            client = topology.async_client(self.topology, self._client_options(redis.asyncio.retry))
            entry = (client, *(client.register_script(text) for text in self._scripts))
            self._async[loop] = entry
        return entry

    def _args(self, req: AcquireRequest, wait: bool) -> tuple[bytes, ...]:
        """ACQUIRE's ARGV, as bytes: token, owner, lease_ms, mode."""
        batch = req.priority is Priority.BATCH
        return (req.token.encode(), self._encode(req.owner),
                b"%d" % max(int(req.lease_seconds * 1000), 1),
                (b"b1" if wait else b"b0") if batch else (b"i1" if wait else b"i0"))

    def _run(self, script: Any, keys: tuple[bytes, ...], args: tuple[bytes, ...]) -> Any:
        """EVALSHA ``script`` on the blocking client (what ``script(keys=, args=)`` does, minus
        its per-call overhead); a server that lost the script gets it loaded again."""
        try:
            return self.client.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
        except NoScriptError:
            return script(keys=keys, args=args)

    @staticmethod
    async def _arun(client: Any, script: Any, keys: tuple[bytes, ...], args: tuple[bytes, ...]) -> Any:
        """Async form of :meth:`_run` on ``client`` (this event loop's)."""
        try:
            return await client.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
        except NoScriptError:
            return await script(keys=keys, args=args)

    def _pause(self, until: float, pttl: int) -> float:
        # a BLPOP must answer well within the socket timeout, or it reads as a stall
        pause = min(until - time.monotonic(), self.recheck, self.timeout / 2)
        if pttl > 0:
            pause = min(pause, pttl / 1000.0 + 0.002)
        return max(pause, 0.001)

    def _unavailable(self, req_key: str, exc: BaseException) -> BackendUnavailable:
        return BackendUnavailable(req_key, self.name, exc)

    # -- blocking -------------------------------------------------------------------
    def acquire(self, req: AcquireRequest) -> Grant:
        keys = self._wire(req.backend_key)
        wait = req.wait_timeout > 0
        args = self._args(req, wait)
        t0 = start = time.monotonic()
        until = t0 + req.wait_timeout
        try:
            if wait and req.backend_key in self._contended:
                first, res = self._fold(self._signal(req), self._pause(until, 0), keys, args)
            else:
                first = res = self._run(self._s_acquire, keys, args)
            if isinstance(first, int):  # the fence: granted at once
                self._contended.discard(req.backend_key)
                return Grant(first, start=start)
            self._was_contended(req.backend_key)
            waited_on = _text(first[1]) or None
            if not wait:
                raise LockTimeout(req.key, 0.0, waited_on, int(first[2]) / 1000.0)
            mine = self._signal(req)
            while not isinstance(res, int):
                if time.monotonic() >= until:
                    start = time.monotonic()
                    res = self._s_cancel(keys=keys, args=(args[0], args[2]))
                    if isinstance(res, int):  # the fence: granted
                        return Grant(res, start=start, waited=start - t0, waited_on=waited_on)
                    raise LockTimeout(req.key, req.wait_timeout, _text(res[1]) or None,
                                      int(res[2]) / 1000.0)
                start = time.monotonic()
                res = self._wait_claim(mine, self._pause(until, int(res[2])), keys, args)
            return self._claimed(req, keys, res, start, t0, waited_on)
        except redis.RedisError as exc:
            self._give_back_later(self._give_back, req.key, keys, args)
            raise self._unavailable(req.key, exc) from exc

    def _signal(self, req: AcquireRequest) -> bytes:
        """The waiter's signal list (its BLPOP key)."""
        return self._encode(self.keys_for(req.backend_key)[1] + req.token)

    def _was_contended(self, backend_key: str) -> None:
        """Remember that ``backend_key`` had to be waited for: the next acquire of it by
        this backend sends its queueing ACQUIRE, BLPOP and claim in one write."""
        if len(self._contended) > 10000:
            self._contended.clear()
        self._contended.add(backend_key)

    def _wait_claim(self, signal: bytes, pause: float, keys: tuple[bytes, ...],
                    args: tuple[bytes, ...]) -> Any:
        return redis_wait.wait_claim(self.client, self._s_acquire, signal, pause, keys, args)

    def _fold(self, signal: bytes, pause: float, keys: tuple[bytes, ...],
              args: tuple[bytes, ...]) -> tuple[Any, Any]:
        return redis_wait.queue_wait_claim(self.client, self._s_acquire, signal, pause, keys, args)

    async def _await_claim(self, client: Any, script: Any, signal: bytes, pause: float,
                           keys: tuple[bytes, ...], args: tuple[bytes, ...]) -> Any:
        return await redis_wait.await_claim(client, script, signal, pause, keys, args)

    def _claimed(self, req: AcquireRequest, keys: tuple[bytes, ...], fence: int, sent: float,
                 t0: float, waited_on: str | None) -> Grant:
        """The grant of a claim written at ``sent`` (see :func:`redis_wait.lease_start`)."""
        start = redis_wait.lease_start(sent, req.lease_seconds)
        if start is None:
            start = time.monotonic()
            if self._run(self._s_extend, keys[:1], self._extend_args(req)) != 1:
                start = sent  # the lease already ended: the safe (early) deadline says so
        return Grant(fence, start=start, waited=time.monotonic() - t0, waited_on=waited_on)

    async def _aclaimed(self, req: AcquireRequest, keys: tuple[bytes, ...], fence: int, sent: float,
                        t0: float, waited_on: str | None) -> Grant:
        start = redis_wait.lease_start(sent, req.lease_seconds)
        if start is None:
            client, _, _, s_extend, _ = self._aclient()
            start = time.monotonic()
            if await self._arun(client, s_extend, keys[:1], self._extend_args(req)) != 1:
                start = sent
        return Grant(fence, start=start, waited=time.monotonic() - t0, waited_on=waited_on)

    @staticmethod
    def _extend_args(req: AcquireRequest) -> tuple[bytes, bytes]:
        return req.token.encode(), b"%d" % max(int(req.lease_seconds * 1000), 1)

    def _give_back(self, key: str, keys: tuple[bytes, ...], args: tuple[bytes, ...]) -> None:
        """After a failed acquire: leave the queue, and release the lock if a script
        whose reply was lost had granted it to this token (compare-and-delete)."""
        try:
            if isinstance(self._run(self._s_cancel, keys, (args[0], args[2])), int):
                self._run(self._s_release, keys, (args[0],))
        except Exception as exc:  # a thread of its own: nothing may escape (the client may be closed)
            log.info("txnsafety: could not give back lock %r after a failed acquire "
                     "(it ends with its lease): %r", key, exc)

    def release(self, lease: HeldLock) -> bool:
        keys = self._wire(lease.backend_key)
        try:
            return self._run(self._s_release, keys, (lease.token.encode(),)) == 1
        except redis.RedisError as exc:
            raise self._unavailable(lease.key, exc) from exc

    def extend(self, lease: HeldLock, seconds: float) -> bool:
        keys, _ = self.keys_for(lease.backend_key)
        try:
            return self._s_extend(keys=keys[:1], args=[lease.token, max(int(seconds * 1000), 1)]) == 1
        except redis.RedisError as exc:
            raise self._unavailable(lease.key, exc) from exc

    def is_held(self, lease: HeldLock) -> bool:
        keys, _ = self.keys_for(lease.backend_key)
        try:
            return _text(self.client.hget(keys[0], "token") or b"") == lease.token
        except redis.RedisError as exc:
            raise self._unavailable(lease.key, exc) from exc

    def holder(self, backend_key: str) -> str | None:
        keys, _ = self.keys_for(backend_key)
        owner = self.client.hget(keys[0], "owner")
        return _text(owner) if owner else None

    def fence_of(self, backend_key: str) -> int:
        """The highest fence handed out for ``backend_key`` (0 if never locked)."""
        keys, _ = self.keys_for(backend_key)
        return int(self.client.get(keys[1]) or 0)

    def close(self) -> None:
        self.client.close()

    # -- async ----------------------------------------------------------------------
    async def aacquire(self, req: AcquireRequest) -> Grant:
        client, s_acquire, s_release, _, s_cancel = self._aclient()
        keys = self._wire(req.backend_key)
        wait = req.wait_timeout > 0
        args = self._args(req, wait)
        t0 = start = time.monotonic()
        until = t0 + req.wait_timeout
        before = _cancelling()
        try:
            try:
                if wait and req.backend_key in self._contended:
                    first, res = await redis_wait.aqueue_wait_claim(
                        client, s_acquire, self._signal(req), self._pause(until, 0), keys, args)
                else:
                    first = res = await self._arun(client, s_acquire, keys, args)
                _resurface_cancel(before)
                if isinstance(first, int):  # the fence: granted at once
                    self._contended.discard(req.backend_key)
                    return Grant(first, start=start)
                self._was_contended(req.backend_key)
                waited_on = _text(first[1]) or None
                if not wait:
                    raise LockTimeout(req.key, 0.0, waited_on, int(first[2]) / 1000.0)
                mine = self._signal(req)
                while not isinstance(res, int):
                    if time.monotonic() >= until:
                        start = time.monotonic()
                        res = await s_cancel(keys=keys, args=(args[0], args[2]))
                        _resurface_cancel(before)
                        if isinstance(res, int):  # the fence: granted
                            return Grant(res, start=start, waited=start - t0, waited_on=waited_on)
                        raise LockTimeout(req.key, req.wait_timeout, _text(res[1]) or None,
                                          int(res[2]) / 1000.0)
                    start = time.monotonic()
                    res = await self._await_claim(client, s_acquire, mine,
                                                  self._pause(until, int(res[2])), keys, args)
                    _resurface_cancel(before)
                return await self._aclaimed(req, keys, res, start, t0, waited_on)
            except asyncio.CancelledError:
                # Leave the queue; if the lock was handed to us (or we just took it),
                # pass it on.  Blocking client: a cancelled task should not await again.
                res = self._s_cancel(keys=keys, args=(args[0], args[2]))
                if isinstance(res, int):  # the fence: granted
                    self._s_release(keys=keys, args=(args[0],))
                raise
        except redis.RedisError as exc:
            self._give_back_later(self._give_back, req.key, keys, args)
            raise self._unavailable(req.key, exc) from exc

    async def arelease(self, lease: HeldLock) -> bool:
        client, _, s_release, _, _ = self._aclient()
        keys = self._wire(lease.backend_key)
        before = _cancelling()
        try:
            ok = await self._arun(client, s_release, keys, (lease.token.encode(),)) == 1
        except redis.RedisError as exc:
            raise self._unavailable(lease.key, exc) from exc
        _resurface_cancel(before)
        return ok

    async def aextend(self, lease: HeldLock, seconds: float) -> bool:
        _, _, _, s_extend, _ = self._aclient()
        keys, _ = self.keys_for(lease.backend_key)
        before = _cancelling()
        try:
            ok = await s_extend(keys=keys[:1], args=[lease.token, max(int(seconds * 1000), 1)]) == 1
        except redis.RedisError as exc:
            raise self._unavailable(lease.key, exc) from exc
        _resurface_cancel(before)
        return ok

    async def ais_held(self, lease: HeldLock) -> bool:
        client = self._aclient()[0]
        keys, _ = self.keys_for(lease.backend_key)
        try:
            return _text(await client.hget(keys[0], "token") or b"") == lease.token
        except redis.RedisError as exc:
            raise self._unavailable(lease.key, exc) from exc
