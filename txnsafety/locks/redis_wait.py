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
from redis.exceptions import NoScriptError

Keys = tuple[bytes, ...]

#: A grant that arrived later than this share of its lease after the write gets its
#: lease restarted from a known time (one EXTEND); see :func:`lease_start`.
LATE_SHARE = 0.05


def _commands(sha: str, signal: bytes, pause: float, keys: Keys, args: Keys) -> tuple[tuple[Any, ...], ...]:
    # BLPOP's timeout is seconds with decimals; 0 would block forever (pause >= 0.001)
    return (("BLPOP", signal, b"%.3f" % max(pause, 0.001)),
            ("EVALSHA", sha, len(keys), *keys, *args))


def wait_claim(client: Any, script: Any, signal: bytes, pause: float, keys: Keys, args: Keys) -> Any:
    """BLPOP on ``signal`` for at most ``pause`` s, then ACQUIRE: ACQUIRE's reply."""
    if isinstance(client, redis.cluster.RedisCluster):
        pipe = client.pipeline(transaction=False)
        for command in _commands(script.sha, signal, pause, keys, args):
            pipe.execute_command(*command)
        popped, res = pipe.execute(raise_on_error=False)
        if isinstance(popped, Exception):
            raise popped
    else:
        pool = client.connection_pool
        conn = pool.get_connection()
        read = False
        try:
            conn.send_packed_command(conn.pack_commands(_commands(script.sha, signal, pause, keys, args)))
            conn.read_response()  # the signal or nil: the claim decides either way
            try:
                res = conn.read_response()
            except NoScriptError as exc:
                res = exc
            read = True
        finally:
            if not read:  # a reply may still be on its way: the connection is out of step
                conn.disconnect()
            pool.release(conn)
    if isinstance(res, NoScriptError):  # the server lost its scripts (restart, SCRIPT FLUSH)
        return script(keys=keys, args=args)
    if isinstance(res, Exception):
        raise res
    return res


async def await_claim(client: Any, script: Any, signal: bytes, pause: float, keys: Keys,
                      args: Keys) -> Any:
    """:func:`wait_claim` on a ``redis.asyncio`` client."""
    if isinstance(client, redis.asyncio.cluster.RedisCluster):
        pipe = client.pipeline(transaction=False)
        for command in _commands(script.sha, signal, pause, keys, args):
            pipe.execute_command(*command)
        popped, res = await pipe.execute(raise_on_error=False)
        if isinstance(popped, Exception):
            raise popped
    else:
        pool = client.connection_pool
        conn = await pool.get_connection()
        read = False
        try:
            await conn.send_packed_command(conn.pack_commands(_commands(script.sha, signal, pause, keys, args)))
            await conn.read_response()
            try:
                res = await conn.read_response()
            except NoScriptError as exc:
                res = exc
            read = True
        finally:
            if not read:  # cancelled or failed between the replies
                await conn.disconnect(nowait=True)
            await pool.release(conn)
    if isinstance(res, NoScriptError):
        return await script(keys=keys, args=args)
    if isinstance(res, Exception):
        raise res
    return res


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
