"""Lua scripts of the Redis backend (each runs atomically on the server).

Keys of one lock share a hash tag, so the scripts are cluster-safe:

* ``KEYS[1]`` lock hash ``{token, owner, fence}`` with a PEXPIRE (the lease);
* ``KEYS[2]`` fence counter (never expires): each grant sets it to the larger of
  its value + 1 and the server's clock in microseconds, so a server that lost
  the counter (restart without persistence, eviction) starts again above every
  fence it handed out before -- see ``NEXT_FENCE``;
* ``KEYS[3]`` / ``KEYS[4]`` interactive / batch wait queues (ZSET token -> arrival
  number: one more than the queue's last score, so ties never happen; see ACQUIRE);
* ``KEYS[5]`` waiter hash ``token -> "alive_until_ms|lease_ms|owner"``;
* ``ARGV[...]`` see each script; signal lists are ``<signal prefix><token>``, the
  signal prefix being ``KEYS[1]`` with its ``lock`` suffix replaced by ``s:``.

The backend's constants (``alive_ms``, ``claim_ms``, ``recheck_ms``) are baked into the script
text by :func:`render` rather than sent as arguments on every call: each
argument costs client-side encoding and packing on the uncontended path.

The lock is never left free while a live waiter is queued: release (and an
acquirer that finds the lock expired) hands it straight to the head waiter --
interactive before batch, each in arrival order -- and pushes that waiter's
signal list, on which it is blocked in BLPOP.  A waiter that died stops
refreshing ``alive_until`` and is skipped.
"""

# The next fence: max(counter + 1, server time in microseconds), stored back.
# Lua numbers are doubles (exact below 2^53, about year 2255 in microseconds) and
# redis.call would format a number argument as %.14g, so it is formatted here.
NEXT_FENCE = r"""
local function next_fence()
  local t = redis.call('TIME')
  local f = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = tonumber(redis.call('GET', KEYS[2]) or '0')
  if f <= last then f = last + 1 end
  local text = string.format('%.0f', f)
  redis.call('SET', KEYS[2], text)
  return f, text
end
"""

COMMON = r"""
local ALIVE_MS = __ALIVE_MS__
local RECHECK_MS = __RECHECK_MS__
local CLAIM_MS = __CLAIM_MS__

-- KEYS[1] is '<base>lock'; signal lists are '<base>s:<token>'
local function sigprefix()
  return string.sub(KEYS[1], 1, -5) .. 's:'
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function split(info)
  local a = string.find(info, '|', 1, true)
  local b = string.find(info, '|', a + 1, true)
  return tonumber(string.sub(info, 1, a - 1)), tonumber(string.sub(info, a + 1, b - 1)),
         string.sub(info, b + 1)
end

-- first live waiter (interactive queue first); prunes dead heads
local function head(now)
  for q = 3, 4 do
    while true do
      local h = redis.call('ZRANGE', KEYS[q], 0, 0)[1]
      if not h then break end
      local info = redis.call('HGET', KEYS[5], h)
      if info then
        local alive = split(info)
        if alive >= now then return h, info end
      end
      redis.call('ZREM', KEYS[q], h)
      redis.call('HDEL', KEYS[5], h)
    end
  end
  return nil, nil
end

local function unqueue(tok)
  redis.call('ZREM', KEYS[3], tok)
  redis.call('ZREM', KEYS[4], tok)
  redis.call('HDEL', KEYS[5], tok)
end

local function grant(tok, owner, lease_ms)
  local fence, text = next_fence()
  redis.call('HSET', KEYS[1], 'token', tok, 'owner', owner, 'fence', text)
  redis.call('PEXPIRE', KEYS[1], lease_ms)
  return fence
end

-- The new holder gets at most claim_ms to claim the lock (its ACQUIRE call,
-- right after its BLPOP wakes, restarts the full lease): a waiter that died
-- while queued only blocks the lock for claim_ms, not for its whole lease.
local function handoff(h, info)
  local _, lease_ms, owner = split(info)
  unqueue(h)
  local fence = grant(h, owner, math.min(lease_ms, CLAIM_MS))
  local sig = sigprefix() .. h
  redis.call('RPUSH', sig, '1')
  redis.call('PEXPIRE', sig, ALIVE_MS)
  return fence
end
"""

# ARGV: token, owner, lease_ms, mode (priority 'i'|'b' then wait '0'|'1': 'i1', 'b0', ...;
# a third letter 'p' when the caller's BLPOP and claim follow in the same write: a grant
# made here then pushes the caller's own signal list, so that BLPOP returns at once)
# -> fence (an integer) acquired | {0, holder_owner, holder_pttl}
ACQUIRE = NEXT_FENCE + r"""
local tok = ARGV[1]
if redis.call('EXISTS', KEYS[1], KEYS[3], KEYS[4]) == 0 then
  -- fast path (before the other helper functions are even created): free, nobody queued
  local fence, text = next_fence()
  redis.call('HSET', KEYS[1], 'token', tok, 'owner', ARGV[2], 'fence', text)
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  if string.byte(ARGV[4], 3) == 112 then  -- 'p': our BLPOP follows in this write
    local sig = string.sub(KEYS[1], 1, -5) .. 's:' .. tok
    redis.call('RPUSH', sig, '1')
    redis.call('PEXPIRE', sig, __ALIVE_MS__)
  end
  return fence
end
""" + COMMON + r"""
local cur = redis.call('HGET', KEYS[1], 'token')
if cur == tok then
  -- handed to us while we waited: start the lease now
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  unqueue(tok)
  redis.call('DEL', sigprefix() .. tok)
  return tonumber(redis.call('HGET', KEYS[1], 'fence'))
end
local now = now_ms()
if not cur then
  local h, info = head(now)
  if (not h) or h == tok then
    unqueue(tok)
    local fence = grant(tok, ARGV[2], ARGV[3])
    if string.byte(ARGV[4], 3) == 112 then
      local sig = sigprefix() .. tok
      redis.call('RPUSH', sig, '1')
      redis.call('PEXPIRE', sig, ALIVE_MS)
    end
    return fence
  end
  handoff(h, info)
end
if string.sub(ARGV[4], 2, 2) == '1' then
  local q = KEYS[3]
  if string.sub(ARGV[4], 1, 1) == 'b' then q = KEYS[4] end
  if not redis.call('ZSCORE', q, tok) then
    -- Behind everyone queued now.  Not the clock: waiters arriving in the same
    -- millisecond would tie, and a ZSET orders ties by member (a random token);
    -- a wall-clock step back would put a newcomer ahead.
    local last = redis.call('ZRANGE', q, -1, -1, 'WITHSCORES')[2]
    redis.call('ZADD', q, (tonumber(last) or 0) + 1, tok)
  end
  redis.call('HSET', KEYS[5], tok, (now + ALIVE_MS) .. '|' .. ARGV[3] .. '|' .. ARGV[2])
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl < RECHECK_MS and string.byte(ARGV[4], 3) == 112 then
  -- the holder's lease may end before our BLPOP (sent with this, bounded by recheck
  -- only) would time out: let it return at once, the next wait is bounded by pttl
  local sig = sigprefix() .. tok
  redis.call('RPUSH', sig, '1')
  redis.call('PEXPIRE', sig, ALIVE_MS)
end
return {0, redis.call('HGET', KEYS[1], 'owner') or '', pttl}
"""

# ARGV: token -> 1 released | 0 not ours
RELEASE = r"""
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
if redis.call('EXISTS', KEYS[3], KEYS[4]) == 0 then return 1 end
""" + NEXT_FENCE + COMMON + r"""
local h, info = head(now_ms())
if h then handoff(h, info) end
return 1
"""

# ARGV: token, lease_ms -> 1 | 0
EXTEND = r"""
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""

# A waiter gives up.  ARGV: token, lease_ms
# -> fence if it had been handed the lock (lease restarted now), else {0, owner, pttl}
CANCEL = NEXT_FENCE + COMMON + r"""
local tok = ARGV[1]
unqueue(tok)
redis.call('DEL', sigprefix() .. tok)
if redis.call('HGET', KEYS[1], 'token') == tok then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return tonumber(redis.call('HGET', KEYS[1], 'fence'))
end
return {0, redis.call('HGET', KEYS[1], 'owner') or '', redis.call('PTTL', KEYS[1])}
"""


def render(script: str, alive_ms: int, claim_ms: int, recheck_ms: int = 1000) -> str:
    """``script`` with one backend's constants filled in (scripts without them are unchanged)."""
    return (script.replace("__ALIVE_MS__", str(int(alive_ms))).replace("__CLAIM_MS__", str(int(claim_ms)))
            .replace("__RECHECK_MS__", str(int(recheck_ms))))
