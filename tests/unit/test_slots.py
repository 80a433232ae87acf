"""Slots on their own, on the memory cache and on a real Redis: all-or-none permits per level,
release only by the owner, renewal re-taking what the cache lost, refused configuration.

Both engines run on a :class:`ManualClock`, so expiry is shown by advancing time. Redis runs
on a unique key prefix per test and is cleared afterwards (as in the cache contract suite).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from tests.contract.test_cache_contract import ENGINES, cache_views

from aigc_hub.cache.base import Cache
from aigc_hub.cache.memory import MemoryCache
from aigc_hub.core.clock import ManualClock
from aigc_hub.core.errors import ConfigurationError
from aigc_hub.reliability.slots import Refusal, Slots

LIMITS = {"site": 3, "team": 2}


def scopes(team: str) -> list[tuple[str, str]]:
    """A two-level layout: one site-wide level, one level per team."""
    return [("site", ""), ("team", team)]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=ENGINES)
async def cache(request: pytest.FixtureRequest, clock: ManualClock) -> AsyncIterator[Cache]:
    async with cache_views(request.param, clock) as views:
        yield views.main


async def test_slots_refuse_the_first_full_level_and_keep_nothing(cache: Cache) -> None:
    slots = Slots(cache.leases, LIMITS, ttl_ms=10_000)
    a1 = await slots.acquire("a1", scopes("ta"))
    assert a1 == ["slot:site:0", "slot:team:ta:0"]
    assert await slots.acquire("a2", scopes("ta")) == ["slot:site:1", "slot:team:ta:1"]
    assert await slots.acquire("a3", scopes("ta")) == Refusal("team")
    assert await cache.leases.holder("slot:site:2") is None  # the site permit was given back
    assert isinstance(await slots.acquire("b1", scopes("tb")), list)
    assert await slots.acquire("b2", scopes("tb")) == Refusal("site")


async def test_slots_release_only_the_owners_permits(cache: Cache) -> None:
    slots = Slots(cache.leases, {"site": 1}, ttl_ms=10_000)
    held = await slots.acquire("a1", [("site", "")])
    assert held == ["slot:site:0"]
    await slots.release("intruder", held)  # not the owner: nothing is freed
    assert await slots.acquire("b1", [("site", "")]) == Refusal("site")
    await slots.release("a1", held)
    await slots.release("a1", held)  # repeating a release is harmless
    assert await slots.acquire("b1", [("site", "")]) == ["slot:site:0"]


async def test_slot_renewal_retakes_permits_the_cache_lost(
    cache: Cache, clock: ManualClock
) -> None:
    slots = Slots(cache.leases, LIMITS, ttl_ms=1_000)
    held = await slots.acquire("a1", scopes("ta"))
    assert isinstance(held, list)
    await clock.advance(2_000)  # every permit expired (a cache restart looks the same)
    assert await slots.renew("a1", held) == held
    other = await slots.acquire("a2", scopes("ta"))
    assert isinstance(other, list) and set(other).isdisjoint(held)


async def test_slot_renewal_replaces_a_permit_another_owner_took(
    cache: Cache, clock: ManualClock
) -> None:
    slots = Slots(cache.leases, LIMITS, ttl_ms=1_000)
    held = await slots.acquire("a1", scopes("ta"))
    assert held == ["slot:site:0", "slot:team:ta:0"]
    await clock.advance(2_000)  # a1's permits lapse; b1 takes the first free ones meanwhile
    assert await slots.acquire("b1", scopes("ta")) == ["slot:site:0", "slot:team:ta:0"]
    assert await slots.renew("a1", held) == ["slot:site:1", "slot:team:ta:1"]
    assert await cache.leases.holder("slot:team:ta:1") is not None


@pytest.mark.parametrize(
    ("limits", "ttl_ms"),
    [({"": 1}, 1_000), ({"a:b": 1}, 1_000), ({"site": -1}, 1_000), ({"site": 1}, 0)],
    ids=["empty-level-name", "colon-in-level-name", "negative-limit", "zero-ttl"],
)
def test_slots_refuse_configuration_that_cannot_work(
    limits: dict[str, int], ttl_ms: int, clock: ManualClock
) -> None:
    with pytest.raises(ConfigurationError):
        Slots(MemoryCache(clock).leases, limits, ttl_ms=ttl_ms)


async def test_slots_refuse_a_level_not_configured(clock: ManualClock) -> None:
    slots = Slots(MemoryCache(clock).leases, LIMITS, ttl_ms=1_000)
    with pytest.raises(ConfigurationError, match="no slot level 'region'"):
        await slots.acquire("a1", [("site", ""), ("region", "eu")])
    assert await slots.acquire("a1", [("site", "")]) == ["slot:site:0"]  # nothing was taken
