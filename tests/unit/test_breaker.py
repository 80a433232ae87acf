"""The circuit breaker on its own: its closed/open/half-open state machine as step tables,
when it opens, and the parameters it refuses."""

from __future__ import annotations

import dataclasses

import pytest

from aigc_hub.core.errors import ConfigurationError, HubError
from aigc_hub.reliability.breaker import BreakerState, CircuitBreaker


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


@pytest.mark.parametrize(
    "params",
    [
        {"window": 0},
        {"min_calls": 0},
        {"window": 4, "min_calls": 5},
        {"max_error_rate": 1.0},
        {"max_error_rate": -0.1},
        {"cool_down_s": 0},
    ],
    ids=str,
)
def test_circuit_breaker_refuses_parameters_that_cannot_work(params: dict[str, float]) -> None:
    with pytest.raises(ConfigurationError, match="circuit breaker") as info:
        dataclasses.replace(CircuitBreaker(), **params)  # the constructor runs again
    assert isinstance(info.value, HubError)
