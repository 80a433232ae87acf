"""The generation pipeline's pure parts: state table, fair order, weights, circuit breaker,
slots (on the in-memory cache), poll backoff."""

from __future__ import annotations

import itertools

import pytest

from aigc_hub.cache.memory import MemoryCache
from aigc_hub.core.clock import ManualClock
from aigc_hub.pipelines.generation.config import GenerationSettings
from aigc_hub.pipelines.generation.providers import BreakerState, CircuitBreaker
from aigc_hub.pipelines.generation.scheduler import Queued, fair_order
from aigc_hub.pipelines.generation.slots import Refusal, Slots
from aigc_hub.pipelines.generation.states import (
    CANCELABLE,
    TERMINAL,
    TRANSITIONS,
    TaskStatus,
    can_move,
    sources_of,
)

S = TaskStatus


def test_terminal_states_never_move_and_every_state_has_a_row() -> None:
    assert set(TRANSITIONS) == set(TaskStatus)
    for state in TERMINAL:
        assert TRANSITIONS[state] == frozenset()
    assert not can_move(S.SUCCEEDED, S.RUNNING)
    assert not can_move(S.CANCELED, S.SUCCEEDED)


def test_cancel_and_success_race_is_decided_by_the_table() -> None:
    # a cancel request may still end in success (the provider finished first) or in CANCELED
    assert can_move(S.CANCEL_REQUESTED, S.OUTPUT_FETCHING)
    assert can_move(S.CANCEL_REQUESTED, S.CANCELED)
    assert S.OUTPUT_FETCHING not in CANCELABLE and S.SUCCEEDED not in CANCELABLE
    assert sources_of(S.SUBMIT_UNKNOWN) == {S.DISPATCHING}


def test_happy_path_is_allowed_step_by_step() -> None:
    path = [
        S.QUEUED,
        S.DISPATCHING,
        S.SUBMITTED,
        S.RUNNING,
        S.OUTPUT_FETCHING,
        S.POST_PROCESSING,
        S.SUCCEEDED,
    ]
    assert all(can_move(a, b) for a, b in itertools.pairwise(path))


def _q(tenant: str, n: int, priority: int = 50, at: int = 0) -> list[Queued]:
    return [Queued(f"{tenant}-{i}", tenant, priority, at + i) for i in range(n)]


def test_fair_order_serves_the_tenant_with_less_running_first_then_alternates() -> None:
    order = fair_order(_q("a", 6) + _q("b", 3, at=100), {"a": 4}, now_ms=1_000, aging_ms=30_000)
    tenants = "".join(q.tenant_id for q in order)
    assert tenants[:3] == "bbb", tenants  # b (nothing running) first, until loads even out


def test_fair_order_with_equal_load_alternates_oldest_first() -> None:
    order = fair_order(_q("a", 3) + _q("b", 3, at=1), {}, now_ms=1_000, aging_ms=30_000)
    assert "".join(q.tenant_id for q in order) == "ababab"


def test_weights_give_a_heavier_tenant_a_bigger_share() -> None:
    order = fair_order(
        _q("a", 8) + _q("b", 8, at=1), {}, now_ms=0, aging_ms=30_000, weights={"a": 3}
    )
    first8 = "".join(q.tenant_id for q in order[:8])
    assert first8.count("a") == 6 and first8.count("b") == 2, first8


def test_aging_lets_an_old_low_priority_task_overtake_a_new_high_priority_one() -> None:
    old_low = Queued("old", "a", 10, queued_at=0)
    new_high = Queued("new", "a", 50, queued_at=3_000_000)
    order = fair_order([new_high, old_low], {}, now_ms=3_000_000, aging_ms=30_000)
    assert [q.id for q in order] == ["old", "new"]  # waited 50 min = +100 steps
    soon = Queued("new", "a", 50, queued_at=60_000)
    fresh = fair_order([soon, old_low], {}, now_ms=60_000, aging_ms=30_000)
    assert [q.id for q in fresh] == ["new", "old"]  # waited 1 min = +2 steps only


def test_tenant_weights_setting_parses_and_refuses_garbage() -> None:
    assert GenerationSettings(tenant_weights="t1=2, t2=0.5").weights() == {"t1": 2.0, "t2": 0.5}
    for bad in ("t1", "t1=0", "=2", "t1=x"):
        with pytest.raises(ValueError, match="TENANT_WEIGHTS"):
            GenerationSettings(tenant_weights=bad).weights()


def opened_breaker(now: list[float]) -> CircuitBreaker:
    """A breaker (cool-down 5 s on the clock ``now``) just opened by 3 failures of 4 submits."""
    breaker = CircuitBreaker(
        window=10, min_calls=4, max_error_rate=0.5, cool_down_s=5, clock=lambda: now[0]
    )
    for n, ok in enumerate((True, False, False, False)):
        assert breaker.admit(f"s{n}")
        breaker.record(f"s{n}", ok)
    return breaker


# (time, action, key, what the step must show): "admit" → admitted?, "record+"/"record-" →
# the state after recording a success/failure of ``key``, "forfeit" → state after.
BreakerStep = tuple[float, str, str, bool | BreakerState]
BREAKER_TABLES: dict[str, list[BreakerStep]] = {
    "open refuses during the cool-down": [
        (0.0, "admit", "a", False),
        (4.9, "admit", "a", False),
    ],
    "after the cool-down exactly one trial is let in": [
        (5.0, "admit", "trial", True),
        (5.0, "admit", "other", False),
        (9.9, "admit", "other", False),
    ],
    "the trial's success closes": [
        (5.0, "admit", "trial", True),
        (6.0, "record+", "trial", BreakerState.CLOSED),
        (6.0, "admit", "other", True),
    ],
    "the trial's failure re-opens for a fresh cool-down": [
        (5.0, "admit", "trial", True),
        (6.0, "record-", "trial", BreakerState.OPEN),
        (10.9, "admit", "other", False),
        (11.0, "admit", "next-trial", True),
    ],
    "successes of calls in flight while open change nothing": [
        (1.0, "record+", "s0", BreakerState.OPEN),
        (5.0, "admit", "trial", True),
        (6.0, "record+", "in-flight", BreakerState.HALF_OPEN),
        (6.0, "admit", "other", False),
        (7.0, "record-", "trial", BreakerState.OPEN),
    ],
    "a trial that never reports is given up after another cool-down": [
        (5.0, "admit", "lost", True),
        (9.9, "admit", "other", False),
        (10.0, "admit", "second", True),
        (10.5, "record+", "lost", BreakerState.HALF_OPEN),
        (11.0, "record+", "second", BreakerState.CLOSED),
    ],
    "a forfeited trial lets the next caller in at once": [
        (5.0, "admit", "trial", True),
        (5.0, "forfeit", "trial", BreakerState.OPEN),
        (5.0, "admit", "next", True),
        (5.0, "forfeit", "someone-else", BreakerState.HALF_OPEN),
    ],
}


@pytest.mark.parametrize("steps", BREAKER_TABLES.values(), ids=BREAKER_TABLES.keys())
def test_circuit_breaker_state_machine(steps: list[BreakerStep]) -> None:
    now = [0.0]
    breaker = opened_breaker(now)
    assert breaker.state is BreakerState.OPEN
    for at, action, key, expected in steps:
        now[0] = at
        if action == "admit":
            assert breaker.admit(key) is expected, (at, action, key)
            continue
        if action == "forfeit":
            breaker.forfeit(key)
        else:
            breaker.record(key, action == "record+")
        assert breaker.state is expected, (at, action, key)


def test_circuit_breaker_opens_only_past_min_calls_and_the_error_rate() -> None:
    breaker = CircuitBreaker(window=4, min_calls=4, max_error_rate=0.5, clock=lambda: 0.0)
    seen: list[BreakerState] = []
    # 3 failures: below min_calls; then 3 of 4 failed but a success cannot open it; then it opens
    for n, ok in enumerate((False, False, False, True, False)):
        breaker.record(f"s{n}", ok)
        seen.append(breaker.state)
    assert seen == [BreakerState.CLOSED] * 4 + [BreakerState.OPEN]
    assert breaker.open and not breaker.admit("s5")


async def test_slots_refuse_the_full_level_and_release_only_their_own() -> None:
    cache = MemoryCache(ManualClock())
    slots = Slots(cache.leases, platform=3, tenant=2, provider=3, model=3, ttl_ms=10_000)
    a1 = await slots.acquire("a1", "ta", "local", "m")
    a2 = await slots.acquire("a2", "ta", "local", "m")
    assert isinstance(a1, list) and isinstance(a2, list)
    assert await slots.acquire("a3", "ta", "local", "m") == Refusal("tenant")
    b1 = await slots.acquire("b1", "tb", "local", "m")
    assert isinstance(b1, list)
    assert await slots.acquire("b2", "tb", "local", "m") == Refusal("platform")
    await slots.release("intruder", a1)  # not the owner: nothing is freed
    assert await slots.acquire("b2", "tb", "local", "m") == Refusal("platform")
    await slots.release("a1", a1)
    assert isinstance(await slots.acquire("b2", "tb", "local", "m"), list)


async def test_slot_renewal_retakes_permits_the_cache_lost() -> None:
    clock = ManualClock()
    cache = MemoryCache(clock)
    slots = Slots(cache.leases, platform=2, tenant=2, provider=2, model=2, ttl_ms=1_000)
    held = await slots.acquire("a1", "ta", "local", "m")
    assert isinstance(held, list)
    await clock.advance(2_000)  # every permit expired (a cache restart looks the same)
    assert await slots.renew("a1", held) == held
    other = await slots.acquire("a2", "ta", "local", "m")
    assert isinstance(other, list) and set(other).isdisjoint(held)
