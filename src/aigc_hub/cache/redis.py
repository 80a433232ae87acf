"""The Redis cache engine (redis-py asyncio): shared by every process, one Lua script per step.

Keys (``prefix`` defaults to ``aigc:``; tests pass a unique one)::

    {prefix}lease:{<name>}             hash owner, token, exp     PX ttl
    {prefix}lease:{<name>}:fence       fencing counter            PX ttl (see FENCE_SLOTS_PER_MS)
    {prefix}timers:{<queue>}           zset member -> due ms
    {prefix}timers:{<queue>}:payloads  hash member -> payload
    {prefix}timers:{<queue>}:claims    hash member -> claiming owner
    {prefix}attempts:<key>             hash n, exp                PX ttl
    {prefix}bucket:<key>               hash tokens, stamp         PX until surely full
    {prefix}progress:<key>             hash v, exp                PX ttl

The ``{...}`` hash tags keep each lease's and each queue's keys in one cluster slot.

Time: each script judges expiry by an ``exp`` stored *in the value*, against a "now" that is
either the Redis server's ``TIME`` (no ``clock`` given: every host agrees, recommended in
production) or the given clock's ``now_ms()`` passed as an argument (tests with a
:class:`ManualClock`, so a lease expires when the test advances time). Redis' own PX expiry
is set too, in real time, as a safety net that frees memory; with a manual clock, keep test
ttls well above the test's real duration (seconds), or PX frees keys early.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aigc_hub.cache import base
from aigc_hub.cache.base import DueTimer, Lease, RateDecision
from aigc_hub.core.clock import Clock
from aigc_hub.core.errors import ConfigurationError

try:
    import redis.asyncio as aioredis
except ImportError as exc:  # name the extra, as every optional engine does
    raise ImportError(
        "the Redis cache engine needs redis-py: pip install 'aigc-hub[redis]'"
    ) from exc

#: Every time-aware script starts with this: ARGV[1] is the caller's now, or '' for TIME.
#: (TIME before writes needs effects replication: the default from Redis 5, the only mode in 7.)
_NOW = """
local function now_ms(arg)
  if arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local now = now_ms(ARGV[1])
"""


def _timed(body: str) -> str:
    """A script whose ``now`` is set from ARGV[1] (see :data:`_NOW`)."""
    return _NOW + body


# KEYS: lease, fence  ARGV: now, owner, ttl, slots per ms  ->  {token, exp} or nil
_ACQUIRE = _timed("""
local cur = redis.call('HMGET', KEYS[1], 'owner', 'token', 'exp')
local token
if cur[1] and tonumber(cur[3]) > now then
  if cur[1] ~= ARGV[2] then return nil end
  token = tonumber(cur[2])
else
  token = redis.call('INCR', KEYS[2])
  local floor = now * tonumber(ARGV[4])
  if token < floor then
    token = floor
    redis.call('SET', KEYS[2], string.format('%d', token))
  end
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
local exp = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'owner', ARGV[2], 'token', string.format('%d', token),
           'exp', string.format('%d', exp))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {token, exp}
""")

# KEYS: lease  ARGV: now, owner, token, ttl  ->  exp or nil
_RENEW = _timed("""
local cur = redis.call('HMGET', KEYS[1], 'owner', 'token', 'exp')
if cur[1] ~= ARGV[2] or cur[2] ~= ARGV[3] or tonumber(cur[3]) <= now then return nil end
local exp = now + tonumber(ARGV[4])
redis.call('HSET', KEYS[1], 'exp', string.format('%d', exp))
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return exp
""")

# KEYS: lease  ARGV: now, owner, token  ->  1 released a live lease, 0 otherwise
_RELEASE = _timed("""
local cur = redis.call('HMGET', KEYS[1], 'owner', 'token', 'exp')
if cur[1] ~= ARGV[2] or cur[2] ~= ARGV[3] then return 0 end
redis.call('DEL', KEYS[1])
if tonumber(cur[3]) > now then return 1 end
return 0
""")

# KEYS: lease  ARGV: now  ->  {owner, token} or nil
_HOLDER = _timed("""
local cur = redis.call('HMGET', KEYS[1], 'owner', 'token', 'exp')
if not cur[1] or tonumber(cur[3]) <= now then return nil end
return {cur[1], tonumber(cur[2])}
""")

# KEYS: zset, payloads, claims  ARGV: member, due, payload
_SCHEDULE = """
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
redis.call('HDEL', KEYS[3], ARGV[1])
"""

# KEYS: zset, payloads, claims  ARGV: now, limit, until, owner ('' = peek only)
#   ->  {member, score, payload, ...}
_TAKE = """
local found = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1],
                        'WITHSCORES', 'LIMIT', 0, ARGV[2])
local out = {}
for i = 1, #found, 2 do
  local member = found[i]
  out[#out + 1] = member
  out[#out + 1] = found[i + 1]
  out[#out + 1] = redis.call('HGET', KEYS[2], member) or ''
  if ARGV[4] ~= '' then
    redis.call('ZADD', KEYS[1], ARGV[3], member)
    redis.call('HSET', KEYS[3], member, ARGV[4])
  end
end
return out
"""

# KEYS: zset, payloads, claims  ARGV: member, owner, check owner ('1'/'0')  ->  removed
_COMPLETE = """
if ARGV[3] == '1' and redis.call('HGET', KEYS[3], ARGV[1]) ~= ARGV[2] then return 0 end
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
return removed
"""

# KEYS: counter  ARGV: now, ttl  ->  the new count
_ATTEMPTS = _timed("""
local cur = redis.call('HMGET', KEYS[1], 'n', 'exp')
if cur[1] and tonumber(cur[2]) > now then
  return redis.call('HINCRBY', KEYS[1], 'n', 1)
end
redis.call('HSET', KEYS[1], 'n', 1, 'exp', string.format('%d', now + tonumber(ARGV[2])))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
""")

# KEYS: bucket  ARGV: now, rate/s, burst, cost  ->  {allowed, remaining, retry_after_s}
# Same arithmetic, in the same order, as MemoryRateLimiter; '%.17g' round-trips doubles.
_BUCKET = _timed("""
local rate, burst, cost = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local tokens, stamp = burst, now
local cur = redis.call('HMGET', KEYS[1], 'tokens', 'stamp')
if cur[1] then
  tokens, stamp = tonumber(cur[1]), tonumber(cur[2])
  if now > stamp then
    tokens = math.min(burst, tokens + (now - stamp) * rate / 1000)
    stamp = now
  end
end
local allowed, retry = 0, 0
if tokens >= cost then
  tokens = tokens - cost
  allowed = 1
else
  retry = (cost - tokens) / rate
end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', tokens),
           'stamp', string.format('%d', stamp))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 60000)
return {allowed, string.format('%.17g', tokens), string.format('%.17g', retry)}
""")


# KEYS: progress  ARGV: now, value, ttl  ->  1 when stored, 0 when a live value is as high
_RAISE = _timed("""
local cur = redis.call('HMGET', KEYS[1], 'v', 'exp')
if cur[1] and tonumber(cur[2]) > now and tonumber(cur[1]) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('HSET', KEYS[1], 'v', ARGV[2], 'exp', string.format('%d', now + tonumber(ARGV[3])))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
""")

# KEYS: progress…  ARGV: now  ->  {value or false, …} in KEYS order
_READ = _timed("""
local out = {}
for i, key in ipairs(KEYS) do
  local cur = redis.call('HMGET', key, 'v', 'exp')
  if cur[1] and tonumber(cur[2]) > now then out[i] = cur[1] else out[i] = false end
end
return out
""")


class _Engine:
    """What every part shares: the client, the key prefix and the source of "now"."""

    def __init__(self, client: aioredis.Redis, prefix: str, clock: Clock | None) -> None:
        self.client = client
        self.prefix = prefix
        self.clock = clock

    def now_arg(self) -> str:
        """The caller's now for a script, or '' to make the script ask Redis ``TIME``."""
        return str(self.clock.now_ms()) if self.clock is not None else ""


class RedisLeases:
    """Leases as hashes; acquire, renew and release are each one Lua script."""

    def __init__(self, engine: _Engine) -> None:
        self._e = engine
        register = engine.client.register_script
        self._acquire, self._renew = register(_ACQUIRE), register(_RENEW)
        self._release, self._holder = register(_RELEASE), register(_HOLDER)

    def _key(self, name: str) -> str:
        return f"{self._e.prefix}lease:{{{name}}}"

    async def acquire(self, name: str, owner: str, ttl_ms: int) -> Lease | None:
        """Take or renew ``name``; a new holder's token is INCR'd in the same script."""
        base.check_ttl(ttl_ms)
        key = self._key(name)
        args: list[str | int] = [self._e.now_arg(), owner, ttl_ms, base.FENCE_SLOTS_PER_MS]
        got = await self._acquire(keys=[key, f"{key}:fence"], args=args)
        return Lease(name, owner, int(got[0]), int(got[1]), ttl_ms) if got else None

    async def renew(self, lease: Lease) -> Lease | None:
        """Extend this tenure if owner and token still match and it has not expired."""
        args: list[str | int] = [self._e.now_arg(), lease.owner, lease.token, lease.ttl_ms]
        exp = await self._renew(keys=[self._key(lease.name)], args=args)
        if exp is None:
            return None
        return Lease(lease.name, lease.owner, lease.token, int(exp), lease.ttl_ms)

    async def release(self, lease: Lease) -> bool:
        """Compare-and-delete on (owner, token); True when the lease was live."""
        args: list[str | int] = [self._e.now_arg(), lease.owner, lease.token]
        return bool(await self._release(keys=[self._key(lease.name)], args=args))

    async def holder(self, name: str) -> tuple[str, int] | None:
        """The live ``(owner, token)`` of ``name``, or None."""
        got = await self._holder(keys=[self._key(name)], args=[self._e.now_arg()])
        return (got[0].decode(), int(got[1])) if got else None


class RedisTimers:
    """Timer queues as a ZSET scored by due time plus payload and claim hashes."""

    def __init__(self, engine: _Engine) -> None:
        self._e = engine
        register = engine.client.register_script
        self._schedule, self._take = register(_SCHEDULE), register(_TAKE)
        self._complete, self._attempts = register(_COMPLETE), register(_ATTEMPTS)

    def _keys(self, queue: str) -> list[str]:
        key = f"{self._e.prefix}timers:{{{queue}}}"
        return [key, f"{key}:payloads", f"{key}:claims"]

    async def schedule(self, queue: str, member: str, due_ms: int, payload: bytes) -> None:
        """Insert or replace ``member`` at ``due_ms``; drops its claim."""
        await self._schedule(keys=self._keys(queue), args=[member, int(due_ms), payload])

    async def _run_take(self, queue: str, args: list[str | int], limit: int) -> list[DueTimer]:
        if limit <= 0:
            return []
        flat = await self._take(keys=self._keys(queue), args=args)
        return [
            DueTimer(flat[i].decode(), bytes(flat[i + 2]), int(float(flat[i + 1])))
            for i in range(0, len(flat), 3)
        ]

    async def due(self, queue: str, now_ms: int, limit: int) -> list[DueTimer]:
        """Due members, earliest first (ties by member); removes none."""
        return await self._run_take(queue, [int(now_ms), limit, 0, ""], limit)

    async def claim(
        self, queue: str, now_ms: int, limit: int, owner: str, visibility_ms: int
    ) -> list[DueTimer]:
        """Take due members and move their score to ``now_ms + visibility_ms``, atomically."""
        if not owner:
            raise ValueError("claim needs a non-empty owner")
        args: list[str | int] = [int(now_ms), limit, int(now_ms) + int(visibility_ms), owner]
        return await self._run_take(queue, args, limit)

    async def complete(self, queue: str, member: str, *, owner: str | None = None) -> bool:
        """Remove ``member`` (only while ``owner``'s claim stands, when given)."""
        args = [member, owner or "", "0" if owner is None else "1"]
        return bool(await self._complete(keys=self._keys(queue), args=args))

    async def next_due(self, queue: str) -> int | None:
        """The earliest score, or None when the queue is empty."""
        first = await self._e.client.zrange(self._keys(queue)[0], 0, 0, withscores=True)
        return int(first[0][1]) if first else None

    async def attempts(self, key: str, ttl_ms: int) -> int:
        """Increment ``key``; a first increment (or one after expiry) starts a new life."""
        base.check_ttl(ttl_ms)
        counter = f"{self._e.prefix}attempts:{key}"
        return int(await self._attempts(keys=[counter], args=[self._e.now_arg(), ttl_ms]))


class RedisRateLimiter:
    """Token buckets, one hash each, updated by one Lua script per request."""

    def __init__(self, engine: _Engine) -> None:
        self._e = engine
        self._bucket = engine.client.register_script(_BUCKET)

    def _key(self, key: str) -> str:
        return f"{self._e.prefix}bucket:{key}"

    async def acquire(
        self, key: str, rate_per_s: float, burst: float, cost: float = 1
    ) -> RateDecision:
        """Take ``cost`` tokens if there are that many; else say when there will be."""
        base.check_bucket(rate_per_s, burst, cost)
        args = [self._e.now_arg(), repr(float(rate_per_s)), repr(float(burst)), repr(float(cost))]
        allowed, remaining, retry = await self._bucket(keys=[self._key(key)], args=args)
        return RateDecision(bool(allowed), float(retry), float(remaining))

    async def reset(self, key: str) -> None:
        """Forget the bucket of ``key``."""
        await self._e.client.delete(self._key(key))


class RedisProgress:
    """Hot progress values, one hash each; raising is one Lua script, reading one more."""

    def __init__(self, engine: _Engine) -> None:
        self._e = engine
        self._raise = engine.client.register_script(_RAISE)
        self._read = engine.client.register_script(_READ)

    def _key(self, key: str) -> str:
        return f"{self._e.prefix}progress:{key}"

    async def raise_to(self, key: str, value: float, ttl_ms: int) -> bool:
        """Store ``value`` unless a live value at least as high is there."""
        base.check_ttl(ttl_ms)
        args: list[str | int] = [self._e.now_arg(), repr(float(value)), ttl_ms]
        return bool(await self._raise(keys=[self._key(key)], args=args))

    async def read(self, keys: Sequence[str]) -> dict[str, float]:
        """The live values of ``keys``."""
        if not keys:
            return {}
        got = await self._read(keys=[self._key(k) for k in keys], args=[self._e.now_arg()])
        return {k: float(v) for k, v in zip(keys, got, strict=True) if v}


class RedisCache(base.Cache):
    """Leases, timers and buckets in Redis under ``prefix``; see the module doc for time."""

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        prefix: str = "aigc:",
        clock: Clock | None = None,
        owns_client: bool = True,
    ) -> None:
        if client.connection_pool.connection_kwargs.get("decode_responses"):
            raise ConfigurationError("RedisCache needs a client with decode_responses=False")
        self.client = client
        self.prefix = prefix
        self._owns_client = owns_client
        engine = _Engine(client, prefix, clock)
        super().__init__(
            leases=RedisLeases(engine),
            timers=RedisTimers(engine),
            limiter=RedisRateLimiter(engine),
            progress=RedisProgress(engine),
            features=base.CacheFeatures(
                cross_process=True, time_source="server" if clock is None else "clock"
            ),
        )

    @classmethod
    def from_url(
        cls, url: str, *, prefix: str = "aigc:", clock: Clock | None = None, **kwargs: Any
    ) -> RedisCache:
        """A cache on ``url`` (``redis://host:port/db``); connects lazily, on first use."""
        client = aioredis.Redis.from_url(url, decode_responses=False, **kwargs)
        return cls(client, prefix=prefix, clock=clock)

    async def clear(self) -> int:
        """Delete every key under this cache's prefix (tests, resets); how many were deleted."""
        pattern = "".join(f"\\{c}" if c in "*?[]\\" else c for c in self.prefix) + "*"
        keys = [key async for key in self.client.scan_iter(match=pattern, count=500)]
        deleted = 0
        for start in range(0, len(keys), 500):
            deleted += int(await self.client.unlink(*keys[start : start + 500]))
        return deleted

    async def close(self) -> None:
        """Close the client's connections when this cache created or was handed them."""
        if self._owns_client:
            await self.client.aclose()
