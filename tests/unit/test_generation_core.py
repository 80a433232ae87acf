"""The generation pipeline's pure parts: state table, fair order, weights, its slot levels,
poll backoff. (The circuit breaker and slots themselves are tested in test_breaker.py and
test_slots.py.)"""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import TYPE_CHECKING, cast

import pytest

from aigc_hub.cache.memory import MemoryCache
from aigc_hub.core.clock import ManualClock
from aigc_hub.pipelines.generation.adapters.base import NormalizedStatus
from aigc_hub.pipelines.generation.rules import (
    Queued,
    Route,
    cheapest_first,
    ended_by_provider,
    fair_order,
    is_reordered,
    next_poll,
    provider_part_over,
    slot_scopes,
)
from aigc_hub.pipelines.generation.settings import GenerationSettings
from aigc_hub.pipelines.generation.state import build
from aigc_hub.pipelines.generation.states import (
    CANCELABLE,
    TERMINAL,
    TRANSITIONS,
    TaskStatus,
    can_move,
    sources_of,
)
from aigc_hub.reliability.slots import Refusal

if TYPE_CHECKING:
    from aigc_hub.bootstrap import Hub

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


@pytest.mark.parametrize(
    ("polls", "spread", "terminal", "expected_ms"),
    [
        (0, 0.0, False, 1_000 + 2_000),  # poll_first_s
        (1, 0.0, False, 1_000 + 4_000),  # doubles per poll
        (3, 0.0, False, 1_000 + 16_000),
        (10, 0.0, False, 1_000 + 60_000),  # capped at poll_max_s
        (5_000, 0.0, False, 1_000 + 60_000),  # no overflow on very many polls
        (0, -1.0, False, 1_000 + 1_600),  # jitter spans ±20 %
        (0, 1.0, False, 1_000 + 2_400),
        (0, 0.0, True, None),  # a terminal job is not polled again
    ],
)
def test_next_poll_backs_off_exponentially_to_the_cap(
    polls: int, spread: float, terminal: bool, expected_ms: int | None
) -> None:
    settings = GenerationSettings(poll_first_s=2.0, poll_max_s=60.0)
    got = next_poll(settings, polls, 1_000, terminal=terminal, spread=spread)
    assert got == expected_ms


def test_routing_prefers_the_cheapest_estimate_then_the_configured_order() -> None:
    a, b, c = Route("a", "m", 30), Route("b", "m", 10), Route("c", "m", 30)
    assert cheapest_first([a, b, c]) == [b, a, c]
    assert cheapest_first([c, b, a]) == [b, c, a]  # a tie keeps the configured order
    assert cheapest_first([]) == []


def test_provider_news_stops_counting_once_the_output_is_ours() -> None:
    over = {status for status in TaskStatus if provider_part_over(status)}
    assert over == TERMINAL | {TaskStatus.OUTPUT_FETCHING, TaskStatus.POST_PROCESSING}


N = NormalizedStatus


@pytest.mark.parametrize(
    ("seen", "observed_at", "known_at", "reordered"),
    [
        (N.RUNNING, 100, 200, True),  # older than what we know
        (N.RUNNING, 200, 200, False),
        (N.RUNNING, 300, 200, False),
        (N.RUNNING, None, 200, False),  # no provider clock: cannot tell
        (N.RUNNING, 100, None, False),  # nothing known yet
        (N.SUCCEEDED, 100, 200, False),  # an end is never dropped as reordered
        (N.FAILED, 100, 200, False),
    ],
)
def test_an_older_non_terminal_observation_is_a_reordered_one(
    seen: NormalizedStatus, observed_at: int | None, known_at: int | None, reordered: bool
) -> None:
    assert is_reordered(seen, observed_at, known_at) is reordered


@pytest.mark.parametrize(
    ("status", "seen", "code", "expected"),
    [
        (TaskStatus.CANCEL_REQUESTED, N.CANCELED, None, (TaskStatus.CANCELED, {})),
        (TaskStatus.CANCEL_REQUESTED, N.FAILED, "oops", (TaskStatus.CANCELED, {})),
        (
            TaskStatus.RUNNING,
            N.CANCELED,
            None,
            (TaskStatus.FAILED, {"failure_class": "provider", "failure_code": "canceled"}),
        ),
        (
            TaskStatus.RUNNING,
            N.FAILED,
            "nsfw",
            (TaskStatus.FAILED, {"failure_class": "provider", "failure_code": "nsfw"}),
        ),
        (
            TaskStatus.SUBMITTED,
            N.FAILED,
            None,
            (TaskStatus.FAILED, {"failure_class": "provider", "failure_code": "provider_failed"}),
        ),
    ],
)
def test_a_provider_end_cancels_what_the_tenant_stopped_and_fails_the_rest(
    status: TaskStatus, seen: NormalizedStatus, code: str | None, expected: object
) -> None:
    assert ended_by_provider(status, seen, code) == expected


def test_tenant_weights_setting_parses_and_refuses_garbage() -> None:
    assert GenerationSettings(tenant_weights="t1=2, t2=0.5").weights() == {"t1": 2.0, "t2": 0.5}
    for bad in ("t1", "t1=0", "=2", "t1=x"):
        with pytest.raises(ValueError, match="TENANT_WEIGHTS"):
            GenerationSettings(tenant_weights=bad).weights()


async def test_generation_slots_take_the_four_levels_under_their_old_permit_names() -> None:
    """Generation's levels and limits come from its settings; the permit names are the ones
    attempts stored before the slots moved to the backbone, so those still renew."""
    settings = GenerationSettings(slots_platform=3, slots_tenant=1, slots_provider=3, slots_model=3)
    hub = cast("Hub", SimpleNamespace(cache=MemoryCache(ManualClock())))  # build reads only .cache
    slots = build(hub, settings, adapters=[]).slots
    route = Route("local", "m", estimated_cost=1)
    held = await slots.acquire("a1", slot_scopes("ta", route))
    assert held == [
        "slot:platform:0",
        "slot:tenant:ta:0",
        "slot:provider:local:0",
        "slot:model:local:m:0",
    ]
    assert await slots.acquire("a2", slot_scopes("ta", route)) == Refusal("tenant")
    assert await slots.renew("a1", held) == held
