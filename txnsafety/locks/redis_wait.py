"""A Redis waiter's wait and claim, sent in one write (one round trip, one wake-up).

Why: under contention a handoff is the releaser's RELEASE script handing the lock
to the head waiter and pushing that waiter's signal list, then the waiter's
``BLPOP`` returning, then the waiter's claiming ACQUIRE (which starts its full
lease).  Sent one after the other, the claim costs a second round trip and a
second wake-up of the waiter, about a third of a contended handoff
(docs/performance.md).  Redis runs one connection's commands in order, so a waiter
that writes ``BLPOP`` and ``EVALSHA ACQUIRE`` together has the claim run on the
server the moment the BLPOP returns -- popped by a handoff, or timed out after
``pause`` (the claim then re-checks a holder that may have died and refreshes the
waiter's queue entry, as before) -- and is woken once, with both replies.

The claim's lease starts on the server at some moment between the write and the
replies; :func:`lease_start` says which client-side time stands for it.

Single servers and Sentinel-watched masters: straight on a pooled connection (a
redis-py pipeline object costs as much Python as the rest of the handoff).
Clusters: a non-transactional cluster pipeline (both keys share the lock's hash tag,
so both commands go to the same node).
"""
from __future__ import annotations

import time
from typing import Any

import redis.asyncio.cluster
import redis.cluster
from redis.exceptions import NoScriptError, ResponseError

Keys = tuple[bytes, ...]

#: A grant that arrived later than this share of its lease after the write gets its
#: lease restarted from a known time (one EXTEND); see :func:`lease_start`.
LATE_SHARE = 0.05


def blpop(signal: bytes, pause: float) -> tuple[Any, ...]:
    # BLPOP's timeout is seconds with decimals; 0 would block forever
    return ("BLPOP", signal, b"%.3f" % max(pause, 0.001))


def evalsha(script: Any, keys: Keys, args: Keys) -> tuple[Any, ...]:
    return ("EVALSHA", script.sha, len(keys), *keys, *args)


def send(client: Any, commands: tuple[tuple[Any, ...], ...]) -> list[Any]:
    """Send ``commands`` in one write; their replies, an error reply as its exception."""
    if isinstance(client, redis.cluster.RedisCluster):
        pipe = client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        return pipe.execute(raise_on_error=False)
    pool = client.connection_pool
    conn = pool.get_connection()
    replies: list[Any] = []
    try:
        conn.send_packed_command(conn.pack_commands(commands))
        for _ in commands:
            try:
                replies.append(conn.read_response())
            except ResponseError as exc:
                replies.append(exc)
    finally:
        if len(replies) < len(commands):  # a reply may still be on its way: out of step
            conn.disconnect()
        pool.release(conn)
    return replies


async def asend(client: Any, commands: tuple[tuple[Any, ...], ...]) -> list[Any]:
    """:func:`send` on a ``redis.asyncio`` client."""
    if isinstance(client, redis.asyncio.cluster.RedisCluster):
        pipe = client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        return await pipe.execute(raise_on_error=False)
    pool = client.connection_pool
    conn = await pool.get_connection()
    replies: list[Any] = []
    try:
        await conn.send_packed_command(conn.pack_commands(commands))
        for _ in commands:
            try:
                replies.append(await conn.read_response())
            except ResponseError as exc:
                replies.append(exc)
    finally:
        if len(replies) < len(commands):  # cancelled or failed between the replies
            await conn.disconnect(nowait=True)
        await pool.release(conn)
    return replies


def _checked(reply: Any) -> Any:
    if isinstance(reply, Exception):
        raise reply
    return reply


def wait_claim(client: Any, script: Any, signal: bytes, pause: float, keys: Keys, args: Keys) -> Any:
    """BLPOP on ``signal`` for at most ``pause`` s, then ACQUIRE: ACQUIRE's reply."""
    popped, res = send(client, (blpop(signal, pause), evalsha(script, keys, args)))
    _checked(popped)
    if isinstance(res, NoScriptError):  # the server lost its scripts (restart, SCRIPT FLUSH)
        return script(keys=keys, args=args)
    return _checked(res)


async def await_claim(client: Any, script: Any, signal: bytes, pause: float, keys: Keys,
                      args: Keys) -> Any:
    """:func:`wait_claim` on a ``redis.asyncio`` client."""
    popped, res = await asend(client, (blpop(signal, pause), evalsha(script, keys, args)))
    _checked(popped)
    if isinstance(res, NoScriptError):
        return await script(keys=keys, args=args)
    return _checked(res)


def _fold_commands(script: Any, signal: bytes, pause: float, keys: Keys,
                   args: Keys) -> tuple[tuple[Any, ...], ...]:
    return (evalsha(script, keys, args[:3] + (args[3] + b"p",)), blpop(signal, pause),
            evalsha(script, keys, args))


def queue_wait_claim(client: Any, script: Any, signal: bytes, pause: float, keys: Keys,
                     args: Keys) -> tuple[Any, Any]:
    """ACQUIRE, BLPOP and the claiming ACQUIRE in one write: (first reply, claim's reply).

    For a key that was contended at this backend's last acquire of it: the first
    ACQUIRE queues the caller (or grants, and then pushes the caller's own signal so
    the BLPOP returns at once), the BLPOP waits, the claim claims.  A contended
    acquire costs one round trip, not two.  If the server lost its scripts, the
    BLPOP has waited ``pause`` for nothing and the plain ACQUIRE is sent (rare:
    after a restart or SCRIPT FLUSH, once per key).
    """
    first, popped, res = send(client, _fold_commands(script, signal, pause, keys, args))
    if isinstance(first, NoScriptError):
        first = res = script(keys=keys, args=args)
    elif isinstance(res, NoScriptError):
        res = script(keys=keys, args=args)
    _checked(popped)
    return _checked(first), _checked(res)


async def aqueue_wait_claim(client: Any, script: Any, signal: bytes, pause: float, keys: Keys,
                            args: Keys) -> tuple[Any, Any]:
    """:func:`queue_wait_claim` on a ``redis.asyncio`` client."""
    first, popped, res = await asend(client, _fold_commands(script, signal, pause, keys, args))
    if isinstance(first, NoScriptError):
        first = res = await script(keys=keys, args=args)
    elif isinstance(res, NoScriptError):
        res = await script(keys=keys, args=args)
    _checked(popped)
    return _checked(first), _checked(res)


def lease_start(sent: float, lease_seconds: float) -> float | None:
    """The client-side start of a lease claimed by a write sent at ``sent`` (monotonic).

    The server started the lease somewhere between the write and now; ``sent`` is
    the safe choice (the client's deadline is then never later than the server's),
    but the client's lease is short by the whole wait.  While that wait is a small
    share of the lease (always, with the default 60 s lease and ``recheck`` of
    1 s), ``sent`` is returned; otherwise None: the caller restarts the lease with
    an EXTEND and takes the time before it (one more round trip, only after a long
    wait, so that a short lease is not reported as ended before its release).
    """
    return sent if time.monotonic() - sent <= lease_seconds * LATE_SHARE else None
