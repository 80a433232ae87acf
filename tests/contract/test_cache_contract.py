"""The cache contract: one suite, run unchanged on the memory engine and on Redis.

Both engines run on a :class:`ManualClock`, so expiry is shown by advancing time, never by
sleeping. ``views.peer()`` is a second process's view of the same state (a new Redis
connection on the same key prefix; the same object in memory, whose state is per process).
Redis tests use a unique key prefix each and delete its keys afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import random
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from aigc_hub.cache import Cache, Lease, LeaseKeeper, Leases, MemoryCache
from aigc_hub.core.clock import Clock, ManualClock
from tests.conftest import service_missing

REDIS_URL = os.environ.get("AIGC_HUB_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
TTL = 30_000  # ms; well above a test's real duration, so Redis' real-time PX never fires
ENGINES = ["memory", pytest.param("redis", marks=pytest.mark.redis)]


class CacheViews:
    """The test's cache, a way to open another process's view of the same state, and a way
    to make the engine forget everything (Redis flushed, the process restarted)."""

    def __init__(
        self, main: Cache, peer: Callable[[], Cache], forget: Callable[[], Awaitable[Cache]]
    ) -> None:
        self.main = main
        self.peer = peer
        self._forget = forget

    async def forget(self) -> None:
        """Lose all state; ``main`` is the cache to use afterwards."""
        self.main = await self._forget()


@contextlib.asynccontextmanager
async def cache_views(engine: str, clock: Clock | None) -> AsyncIterator[CacheViews]:
    """Open ``engine`` on ``clock`` (None: Redis server time); clean up afterwards."""
    if engine == "memory":
        memory = [MemoryCache(clock)]

        async def restart() -> Cache:
            memory[0] = MemoryCache(clock)
            return memory[0]

        yield CacheViews(memory[0], lambda: memory[0], restart)
        return
    from aigc_hub.cache.redis import RedisCache

    prefix = f"aigc-test:{uuid.uuid4().hex}:"
    opened: list[RedisCache] = []

    def open_view() -> RedisCache:
        view = RedisCache.from_url(
            REDIS_URL, prefix=prefix, clock=clock, socket_timeout=5, socket_connect_timeout=2
        )
        opened.append(view)
        return view

    main = open_view()
    try:
        await main.client.ping()
    except Exception as exc:
        await main.close()
        service_missing(
            "Redis",
            f"{REDIS_URL}: {exc.__class__.__name__}; start redis-server or set "
            "AIGC_HUB_TEST_REDIS_URL",
        )

    async def flush() -> Cache:
        await main.clear()
        return main

    try:
        yield CacheViews(main, open_view, flush)
    finally:
        await main.clear()
        for view in opened:
            await view.close()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=ENGINES)
async def views(request: pytest.FixtureRequest, clock: ManualClock) -> AsyncIterator[CacheViews]:
    async with cache_views(request.param, clock) as opened:
        yield opened


@pytest.fixture
def cache(views: CacheViews) -> Cache:
    return views.main


# -- leases ----------------------------------------------------------------------------------


async def test_acquire_renew_release_only_by_the_owner(cache: Cache, clock: ManualClock) -> None:
    leases = cache.leases
    a = await leases.acquire("job:1", "A", TTL)
    assert a is not None and (a.name, a.owner, a.ttl_ms) == ("job:1", "A", TTL)
    assert a.expires_at_ms == clock.now_ms() + TTL
    assert await leases.holder("job:1") == ("A", a.token)

    await clock.advance(10)
    renewed = await leases.renew(a)
    assert renewed is not None and renewed.token == a.token
    assert renewed.expires_at_ms == clock.now_ms() + TTL

    impostor = Lease("job:1", "B", a.token, a.expires_at_ms, TTL)
    assert await leases.renew(impostor) is None
    assert await leases.release(impostor) is False
    assert await leases.holder("job:1") == ("A", a.token)

    assert await leases.release(renewed) is True
    assert await leases.holder("job:1") is None
    assert await leases.release(renewed) is False
    assert await leases.renew(renewed) is None


async def test_a_second_owner_is_refused_while_the_lease_is_held(views: CacheViews) -> None:
    a = await views.main.leases.acquire("job:1", "A", TTL)
    assert a is not None
    other = views.peer().leases
    assert await other.acquire("job:1", "B", TTL) is None
    assert await other.holder("job:1") == ("A", a.token)
    assert await other.acquire("job:2", "B", TTL) is not None  # names are independent


async def test_fencing_token_grows_on_every_holder_change_and_stays_on_renewal(
    cache: Cache, clock: ManualClock
) -> None:
    leases = cache.leases
    a1 = await leases.acquire("job:1", "A", TTL)
    assert a1 is not None
    again = await leases.acquire("job:1", "A", TTL)  # re-acquire by the holder renews
    renewed = await leases.renew(a1)
    assert again is not None and renewed is not None
    assert again.token == renewed.token == a1.token

    assert await leases.release(a1)
    b = await leases.acquire("job:1", "B", TTL)
    assert b is not None and b.token > a1.token
    assert await leases.release(b)
    a2 = await leases.acquire("job:1", "A", TTL)  # the first owner again: a new tenure
    assert a2 is not None and a2.token > b.token

    await clock.advance(TTL / 1000)  # expired; even the same owner starts a new tenure
    a3 = await leases.acquire("job:1", "A", TTL)
    assert a3 is not None and a3.token > a2.token
    assert await leases.release(a2) is False  # an older tenure cannot release a newer one
    assert await leases.holder("job:1") == ("A", a3.token)

    assert await leases.release(a3)
    tokens = [a3.token]
    for i in range(50):  # many holder changes within one millisecond
        lease = await leases.acquire("job:1", f"W{i}", TTL)
        assert lease is not None and await leases.release(lease)
        tokens.append(lease.token)
    assert tokens == sorted(set(tokens))


async def test_tokens_keep_growing_after_the_cache_forgets_everything(
    views: CacheViews, clock: ManualClock
) -> None:
    a = await views.main.leases.acquire("job:1", "A", TTL)
    assert a is not None
    await views.forget()  # Redis flushed or failed over; the process restarted
    await clock.advance(0.001)
    b = await views.main.leases.acquire("job:1", "B", TTL)
    assert b is not None and b.token > a.token


async def test_a_holder_that_stops_renewing_loses_the_lease_after_the_ttl(
    views: CacheViews, clock: ManualClock
) -> None:
    leases = views.main.leases
    a = await leases.acquire("job:1", "A", TTL)
    assert a is not None
    await clock.advance(TTL / 1000 - 0.001)
    assert await leases.holder("job:1") == ("A", a.token)  # still A's, 1 ms before the end
    await clock.advance(0.001)
    assert await leases.holder("job:1") is None

    b = await views.peer().leases.acquire("job:1", "B", TTL)
    assert b is not None and b.token > a.token
    assert await leases.renew(a) is None  # A's late renewal fails
    assert await leases.acquire("job:1", "A", TTL) is None
    assert await leases.release(a) is False
    assert await leases.holder("job:1") == ("B", b.token)


class Watched:
    """Leases wrapper: ``gate`` stalls renewals (a paused process), ``failing`` makes them
    raise (cache unreachable), ``renewed`` fires after every renewal attempt."""

    def __init__(self, inner: Leases) -> None:
        self.inner = inner
        self.gate = asyncio.Event()
        self.gate.set()
        self.failing = False
        self.renewed = asyncio.Event()

    async def acquire(self, name: str, owner: str, ttl_ms: int) -> Lease | None:
        return await self.inner.acquire(name, owner, ttl_ms)

    async def renew(self, lease: Lease) -> Lease | None:
        await self.gate.wait()
        try:
            if self.failing:
                raise ConnectionError("cache unreachable")
            return await self.inner.renew(lease)
        finally:
            self.renewed.set()

    async def release(self, lease: Lease) -> bool:
        return await self.inner.release(lease)

    async def holder(self, name: str) -> tuple[str, int] | None:
        return await self.inner.holder(name)

    async def tick(self, clock: ManualClock, seconds: float) -> None:
        """Advance the clock to the keeper's next renewal and wait until it was attempted."""
        self.renewed.clear()
        await clock.advance(seconds)
        await asyncio.wait_for(self.renewed.wait(), 5)


async def test_lease_keeper_renews_every_third_of_the_ttl_and_releases_on_exit(
    cache: Cache, clock: ManualClock
) -> None:
    lease = await cache.leases.acquire("job:1", "A", TTL)
    assert lease is not None
    watched = Watched(cache.leases)
    async with LeaseKeeper(watched, lease, clock) as keeper:
        for _ in range(6):  # twice the ttl
            await watched.tick(clock, TTL / 3000)
        assert not keeper.lost.is_set()
        assert keeper.lease.token == lease.token
        assert keeper.lease.expires_at_ms == clock.now_ms() + TTL
        assert await cache.leases.holder("job:1") == ("A", lease.token)
    assert await cache.leases.holder("job:1") is None


async def test_lease_keeper_sets_lost_when_a_stalled_renewal_comes_too_late(
    views: CacheViews, clock: ManualClock
) -> None:
    leases = views.main.leases
    lease = await leases.acquire("job:1", "A", TTL)
    assert lease is not None
    watched = Watched(leases)
    watched.gate.clear()  # A's process pauses just as it wants to renew
    async with LeaseKeeper(watched, lease, clock) as keeper:
        await clock.advance(TTL / 3000)
        await clock.advance(TTL / 1000)
        b = await views.peer().leases.acquire("job:1", "B", TTL)
        assert b is not None and b.token > lease.token
        watched.gate.set()
        await asyncio.wait_for(keeper.lost.wait(), 5)
    assert await leases.holder("job:1") == ("B", b.token)  # exit released nothing of B's


async def test_lease_keeper_rides_out_failures_shorter_than_the_ttl(
    cache: Cache, clock: ManualClock
) -> None:
    lease = await cache.leases.acquire("job:1", "A", TTL)
    assert lease is not None
    watched = Watched(cache.leases)
    async with LeaseKeeper(watched, lease, clock) as keeper:
        watched.failing = True
        await watched.tick(clock, 10)  # fails at 10 s: retried
        watched.failing = False
        await watched.tick(clock, 10)  # renewed at 20 s
        assert not keeper.lost.is_set()
        watched.failing = True
        await watched.tick(clock, 10)
        await watched.tick(clock, 10)
        assert not keeper.lost.is_set()
        await watched.tick(clock, 10)  # 30 s without a renewal: the lease may be gone
        assert keeper.lost.is_set()


# -- timers ----------------------------------------------------------------------------------


async def test_due_lists_due_members_in_order_and_removes_none(
    cache: Cache, clock: ManualClock
) -> None:
    timers, now = cache.timers, clock.now_ms()
    assert await timers.next_due("q") is None
    await timers.schedule("q", "late", now + 60_000, b"L")
    await timers.schedule("q", "b", now - 10, b"B")
    await timers.schedule("q", "a", now - 10, b"A")
    await timers.schedule("q", "first", now - 500, b"")
    await timers.schedule("other", "x", now - 999, b"X")

    due = await timers.due("q", now, 10)
    assert [(t.member, t.payload, t.due_ms) for t in due] == [
        ("first", b"", now - 500),
        ("a", b"A", now - 10),
        ("b", b"B", now - 10),
    ]
    assert await timers.due("q", now, 10) == due  # nothing was removed
    assert [t.member for t in await timers.due("q", now, 2)] == ["first", "a"]
    assert await timers.due("q", now, 0) == []
    assert await timers.next_due("q") == now - 500

    await timers.schedule("q", "first", now + 1_000, b"again")  # replaces the entry
    assert [t.member for t in await timers.due("q", now, 10)] == ["a", "b"]
    later = await timers.due("q", now + 60_000, 10)
    assert [(t.member, t.payload) for t in later][-2:] == [("first", b"again"), ("late", b"L")]

    assert await timers.complete("q", "a") is True
    assert await timers.complete("q", "a") is False
    assert [t.member for t in await timers.due("q", now, 10)] == ["b"]


async def test_claim_hides_members_for_the_visibility_window(
    cache: Cache, clock: ManualClock
) -> None:
    timers, now = cache.timers, clock.now_ms()
    await timers.schedule("q", "m1", now - 2, b"1")
    await timers.schedule("q", "m2", now - 1, b"2")
    await timers.schedule("q", "m3", now + 5_000, b"3")

    got = await timers.claim("q", now, 10, "dispatcher-A", 60_000)
    assert [(t.member, t.payload, t.due_ms) for t in got] == [
        ("m1", b"1", now - 2),
        ("m2", b"2", now - 1),
    ]
    assert await timers.claim("q", now, 10, "dispatcher-B", 60_000) == []
    assert await timers.due("q", now, 10) == []
    assert await timers.next_due("q") == now + 5_000

    await clock.advance(60)  # A died without completing: the members are due again
    now = clock.now_ms()
    again = await timers.claim("q", now, 10, "dispatcher-B", 60_000)
    assert [t.member for t in again] == ["m3", "m1", "m2"]
    assert await timers.complete("q", "m1", owner="dispatcher-A") is False  # not A's anymore
    assert await timers.complete("q", "m1", owner="dispatcher-B") is True
    assert await timers.complete("q", "m2") is True  # without owner: unconditional
    assert await timers.complete("q", "m3", owner="dispatcher-B") is True
    assert await timers.next_due("q") is None


async def test_two_claimers_never_both_get_a_member(views: CacheViews, clock: ManualClock) -> None:
    now = clock.now_ms()
    members = {f"m{i:02}" for i in range(40)}
    for i, member in enumerate(sorted(members)):
        await views.main.timers.schedule("q", member, now - i, member.encode())
    first, second = views.main.timers, views.peer().timers
    got_a, got_b = await asyncio.gather(
        first.claim("q", now, 25, "A", 60_000), second.claim("q", now, 25, "B", 60_000)
    )
    a, b = {t.member for t in got_a}, {t.member for t in got_b}
    assert not a & b
    assert a | b == members
    assert sorted([len(a), len(b)]) == [15, 25]


async def test_complete_after_republish_and_a_claim_never_completed_is_claimed_again(
    cache: Cache, clock: ManualClock
) -> None:
    """The seed-002 dispatcher: claim, re-publish, then complete; a claim the dispatcher
    never completes (as if it died in between) comes due again: at-least-once."""
    timers, published = cache.timers, []
    await timers.schedule("retry", "task-1", clock.now_ms(), b"payload-1")
    await timers.schedule("retry", "task-2", clock.now_ms(), b"payload-2")

    for t in await timers.claim("retry", clock.now_ms(), 10, "D", 10_000):
        published.append(t.payload)
        if t.member == "task-2":
            continue  # stops between re-publish and complete
        assert await timers.complete("retry", t.member, owner="D")
    await clock.advance(10)
    for t in await timers.claim("retry", clock.now_ms(), 10, "D", 10_000):
        published.append(t.payload)
        assert await timers.complete("retry", t.member, owner="D")
    assert published == [b"payload-1", b"payload-2", b"payload-2"]  # at-least-once
    assert await timers.next_due("retry") is None


async def test_completing_a_claim_does_not_remove_a_newer_schedule(
    cache: Cache, clock: ManualClock
) -> None:
    timers, now = cache.timers, clock.now_ms()
    await timers.schedule("retry", "task-1", now, b"attempt-2")
    [claimed] = await timers.claim("retry", now, 1, "D", 10_000)
    # the re-published task fails again and is parked before the dispatcher completes
    await timers.schedule("retry", "task-1", now + 120_000, b"attempt-3")
    assert await timers.complete("retry", claimed.member, owner="D") is False
    assert await timers.next_due("retry") == now + 120_000


async def test_attempts_count_up_and_expire_after_their_ttl(
    cache: Cache, clock: ManualClock
) -> None:
    day = 24 * 3600 * 1000
    timers = cache.timers
    assert [await timers.attempts("attempts:transcode:1", day) for _ in range(3)] == [1, 2, 3]
    assert await timers.attempts("attempts:transcode:2", day) == 1
    await clock.advance(day / 1000 - 1)  # the ttl runs from the first increment
    assert await timers.attempts("attempts:transcode:1", day) == 4
    await clock.advance(1)
    assert await timers.attempts("attempts:transcode:1", day) == 1
    assert await timers.attempts("attempts:transcode:2", day) == 1


# -- hot progress ----------------------------------------------------------------------------


async def test_progress_only_rises_and_is_gone_after_its_ttl(
    cache: Cache, clock: ManualClock
) -> None:
    minute = 60_000
    progress = cache.progress
    assert await progress.raise_to("task:progress:1", 0.25, minute)
    assert await progress.raise_to("task:progress:1", 0.5, minute)
    assert not await progress.raise_to("task:progress:1", 0.4, minute)  # a late, lower report
    assert not await progress.raise_to("task:progress:1", 0.5, minute)  # a repeat
    assert await progress.raise_to("task:progress:2", 0.1, 2 * minute)
    assert await progress.read(["task:progress:1", "task:progress:2", "task:progress:3"]) == {
        "task:progress:1": 0.5,
        "task:progress:2": 0.1,
    }
    await clock.advance(minute / 1000)  # 1 expires now; 2 lives a minute more
    assert await progress.read(["task:progress:1", "task:progress:2"]) == {"task:progress:2": 0.1}
    assert await progress.raise_to("task:progress:1", 0.1, minute)  # expired: a new life
    assert await progress.read(["task:progress:1"]) == {"task:progress:1": 0.1}
    assert await progress.read([]) == {}
    with pytest.raises(ValueError, match="ttl"):
        await progress.raise_to("task:progress:1", 0.9, 0)


async def test_progress_is_seen_by_another_view_of_the_same_state(views: CacheViews) -> None:
    assert await views.main.progress.raise_to("task:progress:9", 0.7, 60_000)
    assert await views.peer().progress.read(["task:progress:9"]) == {"task:progress:9": 0.7}


# -- rate limits -----------------------------------------------------------------------------


async def test_bucket_allows_the_burst_then_refills_at_the_rate(
    cache: Cache, clock: ManualClock
) -> None:
    limiter = cache.limiter
    for left in (2, 1, 0):
        d = await limiter.acquire("tenant:1", rate_per_s=2, burst=3)
        assert d.allowed and d.retry_after_s == 0 and d.remaining == pytest.approx(left)
    d = await limiter.acquire("tenant:1", 2, 3)
    assert not d.allowed and d.retry_after_s == pytest.approx(0.5) and d.remaining == 0

    await clock.advance(0.25)
    d = await limiter.acquire("tenant:1", 2, 3)
    assert not d.allowed and d.retry_after_s == pytest.approx(0.25)
    assert d.remaining == pytest.approx(0.5)
    await clock.advance(0.25)
    d = await limiter.acquire("tenant:1", 2, 3)
    assert d.allowed and d.remaining == pytest.approx(0)

    await clock.advance(1)
    d = await limiter.acquire("tenant:1", 2, 3, cost=3)  # 2 tokens: not enough, none taken
    assert not d.allowed and d.retry_after_s == pytest.approx(0.5)
    assert d.remaining == pytest.approx(2)
    await clock.advance(60)  # refills up to the burst only
    d = await limiter.acquire("tenant:1", 2, 3, cost=3)
    assert d.allowed and d.remaining == pytest.approx(0)


async def test_buckets_are_per_key_and_can_be_reset(cache: Cache) -> None:
    limiter = cache.limiter
    assert (await limiter.acquire("a", 1, 1)).allowed
    assert not (await limiter.acquire("a", 1, 1)).allowed
    assert (await limiter.acquire("b", 1, 1)).allowed
    await limiter.reset("a")
    assert (await limiter.acquire("a", 1, 1)).allowed
    with pytest.raises(ValueError):
        await limiter.acquire("a", 1, 1, cost=2)  # could never pass
    with pytest.raises(ValueError):
        await limiter.acquire("a", 0, 1)


async def test_arguments_that_could_never_work_are_refused(cache: Cache) -> None:
    with pytest.raises(ValueError):
        await cache.leases.acquire("job:1", "A", 0)
    with pytest.raises(ValueError):
        await cache.timers.attempts("k", -1)
    with pytest.raises(ValueError):
        await cache.timers.claim("q", 0, 10, "", 1_000)  # a claim must say whose it is


# -- engine specifics ------------------------------------------------------------------------


@pytest.mark.redis
async def test_redis_keys_carry_a_real_expiry_as_a_safety_net(
    clock: ManualClock,
) -> None:
    async with cache_views("redis", clock) as opened:
        from aigc_hub.cache.redis import RedisCache

        cache = opened.main
        assert isinstance(cache, RedisCache)
        lease = await cache.leases.acquire("job:1", "A", TTL)
        assert lease is not None
        await cache.timers.attempts("t:1", 86_400_000)
        lease_key = f"{cache.prefix}lease:{{job:1}}"
        assert 0 < await cache.client.pttl(lease_key) <= TTL
        assert 0 < await cache.client.pttl(f"{cache.prefix}attempts:t:1") <= 86_400_000
        assert await cache.leases.release(lease)
        assert int(await cache.client.get(f"{lease_key}:fence")) == lease.token
        assert 0 < await cache.client.pttl(f"{lease_key}:fence") <= TTL


@pytest.mark.redis
async def test_memory_and_redis_buckets_agree_bit_for_bit(clock: ManualClock) -> None:
    """The memory double is faithful: the same float arithmetic in the same order."""
    rng = random.Random(7)
    params = {"a": (2.0, 3.0), "b": (0.3, 1.5), "c": (7.0, 10.0)}
    async with cache_views("memory", clock) as memory, cache_views("redis", clock) as redis:
        for _ in range(300):
            key = rng.choice(sorted(params))
            cost = rng.choice([0.0, 0.5, 1.0, 1.0])
            mine = await memory.main.limiter.acquire(key, *params[key], cost=cost)
            theirs = await redis.main.limiter.acquire(key, *params[key], cost=cost)
            assert mine == theirs
            await clock.advance(rng.choice([0, 0.001, 0.137, 0.5]))


@pytest.mark.redis
async def test_redis_without_a_clock_uses_server_time() -> None:
    async with cache_views("redis", None) as opened:
        cache = opened.main
        assert cache.features.time_source == "server"
        lease = await cache.leases.acquire("job:1", "A", TTL)
        assert lease is not None
        assert await cache.leases.holder("job:1") == ("A", lease.token)
        renewed = await cache.leases.renew(lease)
        assert renewed is not None and renewed.expires_at_ms >= lease.expires_at_ms
        assert await opened.peer().leases.acquire("job:1", "B", TTL) is None
        assert await cache.leases.release(renewed)
        assert (await cache.limiter.acquire("k", 1, 1)).allowed
        assert not (await cache.limiter.acquire("k", 1, 1)).allowed
        assert await cache.timers.attempts("k", TTL) == 1


def test_features_say_who_shares_the_state() -> None:
    assert MemoryCache(ManualClock()).features.cross_process is False


def test_missing_redis_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)
    monkeypatch.setitem(sys.modules, "redis.asyncio", None)
    monkeypatch.delitem(sys.modules, "aigc_hub.cache.redis", raising=False)
    with pytest.raises(ImportError, match=r"pip install 'aigc-hub\[redis\]'"):
        importlib.import_module("aigc_hub.cache.redis")
