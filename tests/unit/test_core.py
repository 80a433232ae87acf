"""The pure core: ids, clocks, retry maths, the error tree and failpoints."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import itertools
import pkgutil
import random
import sys
import time
import types
import uuid

import pytest

from aigc_hub.core import errors, ids
from aigc_hub.core.clock import ManualClock, SystemClock
from aigc_hub.core.failpoints import NONE, Crash, Failpoints
from aigc_hub.core.retry import DELAYED, IN_PROCESS, RetryDecision, RetryPolicy

# --- ids --------------------------------------------------------------------------------------


def test_new_id_is_a_uuid7_of_the_rfc_variant() -> None:
    value = ids.new_id()

    assert isinstance(value, uuid.UUID)
    assert value.version == 7
    assert value.hex[12] == "7"  # the version nibble itself
    assert value.variant == uuid.RFC_4122


def _id_ms(value: uuid.UUID) -> int:
    """The creation time a UUIDv7 carries: its leading 48 bits, epoch milliseconds."""
    return int(value.hex[:12], 16)


def test_new_id_carries_the_current_epoch_milliseconds() -> None:
    before = time.time_ns() // 1_000_000
    value = ids.new_id()
    after = time.time_ns() // 1_000_000

    assert before <= _id_ms(value) <= after


def test_new_id_str_is_canonical() -> None:
    text = ids.new_id_str()

    assert len(text) == 36
    assert str(uuid.UUID(text)) == text
    assert uuid.UUID(text).version == 7


def test_ids_are_unique_and_time_ordered_over_a_sequence() -> None:
    made = [ids.new_id() for _ in range(5_000)]

    assert all(a < b for a, b in itertools.pairwise(made))
    texts = [str(v) for v in made]
    assert texts == sorted(texts)  # string order is creation order too


# A generator that orders ids within one millisecond by bumping the timestamp (as uuid6 did)
# stamps a burst of ids in the future, and ids of another process made a moment later sort
# before them. These two tests keep that from coming back.
def test_a_burst_of_ids_does_not_run_ahead_of_the_clock() -> None:
    for _ in range(5_000):
        ids.new_id()

    value = ids.new_id()
    now = time.time_ns() // 1_000_000

    assert _id_ms(value) <= now, f"id claims {_id_ms(value) - now} ms in the future"


def test_ids_made_in_a_later_millisecond_sort_after_a_burst() -> None:
    before_restart = [ids.new_id() for _ in range(5_000)]
    last_ms = time.time_ns() // 1_000_000
    while time.time_ns() // 1_000_000 <= last_ms:  # spin into the next millisecond (< 1 ms)
        pass

    after_restart = ids.new_id()

    assert after_restart > max(before_restart)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0190a6b2-7c4e-7d3a-9f10-2b3c4d5e6f70", True),
        ("0190A6B2-7C4E-7D3A-9F10-2B3C4D5E6F70", True),
        ("0190a6b27c4e7d3a9f102b3c4d5e6f70", True),
        ("b450526e-e2ea-400e-a9c3-a52c74bf8655", True),  # a version-4 UUID
        ("", False),
        ("not-a-uuid", False),
        ("0190a6b2-7c4e-7d3a-9f10-2b3c4d5e6f7", False),
        ("0190a6b2-7c4e-7d3a-9f10-2b3c4d5e6f7g", False),
        (None, False),
        (123, False),
    ],
)
def test_is_uuid(value: object, expected: bool) -> None:
    assert ids.is_uuid(value) is expected  # type: ignore[arg-type]


# --- clock ------------------------------------------------------------------------------------

START = 1_000_000


async def test_manual_clock_starts_where_told_and_stands_still() -> None:
    clock = ManualClock(start_ms=START)

    await asyncio.sleep(0)

    assert clock.now_ms() == START
    assert ManualClock().now_ms() == 1_767_225_600_000


async def test_advance_without_sleepers_moves_time() -> None:
    clock = ManualClock(start_ms=START)

    await clock.advance(1.5)
    await clock.advance(0.25)

    assert clock.now_ms() == START + 1_750


async def test_sleepers_wake_in_deadline_order_only_when_their_deadline_is_reached() -> None:
    clock = ManualClock(start_ms=START)
    woke: list[tuple[str, int]] = []

    async def sleeper(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append((name, clock.now_ms()))

    tasks = [asyncio.create_task(sleeper(name, s)) for name, s in (("c", 3), ("a", 1), ("b", 2))]
    await asyncio.sleep(0)
    assert clock.sleepers == 3

    await clock.advance(0.999)
    assert woke == []
    assert clock.sleepers == 3

    await clock.advance(0.001)  # exactly at a's deadline
    assert woke == [("a", START + 1_000)]

    await clock.advance(10)
    assert woke == [("a", START + 1_000), ("b", START + 2_000), ("c", START + 3_000)]
    assert clock.now_ms() == START + 11_000
    assert clock.sleepers == 0
    await asyncio.gather(*tasks)


async def test_equal_deadlines_wake_in_the_order_they_slept() -> None:
    clock = ManualClock(start_ms=START)
    woke: list[int] = []

    async def sleeper(n: int) -> None:
        await clock.sleep(1)
        woke.append(n)

    tasks = []
    for n in range(5):
        tasks.append(asyncio.create_task(sleeper(n)))
        await asyncio.sleep(0)
    await clock.advance(1)

    assert woke == [0, 1, 2, 3, 4]
    await asyncio.gather(*tasks)


async def test_one_advance_wakes_a_periodic_sleeper_at_each_period() -> None:
    clock = ManualClock(start_ms=START)
    ticks: list[int] = []

    async def ticker() -> None:
        while True:
            await clock.sleep(1)
            ticks.append(clock.now_ms())

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    await clock.advance(3.5)

    assert ticks == [START + 1_000, START + 2_000, START + 3_000]
    assert clock.now_ms() == START + 3_500
    assert clock.next_deadline_ms() == START + 4_000
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_next_deadline_ms() -> None:
    clock = ManualClock(start_ms=START)
    assert clock.next_deadline_ms() is None

    late = asyncio.create_task(clock.sleep(5))
    early = asyncio.create_task(clock.sleep(2))
    await asyncio.sleep(0)
    assert clock.next_deadline_ms() == START + 2_000

    early.cancel()
    with pytest.raises(asyncio.CancelledError):
        await early
    assert clock.next_deadline_ms() == START + 5_000  # a cancelled sleeper no longer counts
    assert clock.sleepers == 1

    await clock.advance(5)
    await late
    assert clock.next_deadline_ms() is None


async def test_zero_sleep_on_manual_clock_returns_without_advancing() -> None:
    clock = ManualClock(start_ms=START)

    await asyncio.wait_for(clock.sleep(0), timeout=1)
    await asyncio.wait_for(clock.sleep(-3), timeout=1)

    assert clock.now_ms() == START
    assert clock.next_deadline_ms() is None


async def test_system_clock_is_wall_time_in_ms_and_sleeps_briefly() -> None:
    clock = SystemClock()

    before = time.time_ns() // 1_000_000
    now = clock.now_ms()
    after = time.time_ns() // 1_000_000
    assert before <= now <= after
    assert now > 1_700_000_000_000  # epoch milliseconds, not seconds

    started = time.monotonic()
    await clock.sleep(-10)  # negative means "no wait", not an error
    await clock.sleep(0)
    await clock.sleep(0.005)
    elapsed = time.monotonic() - started
    assert 0.004 <= elapsed < 1.0


# --- retry ------------------------------------------------------------------------------------

NO_JITTER_IN_PROCESS = dataclasses.replace(IN_PROCESS, jitter=0.0)
NO_JITTER_DELAYED = dataclasses.replace(DELAYED, jitter=0.0)


def test_the_seeded_policies_have_the_seeds_numbers() -> None:
    assert (IN_PROCESS.base, IN_PROCESS.factor, IN_PROCESS.cap) == (1.0, 2.0, 8.0)
    assert (IN_PROCESS.max_retries, IN_PROCESS.jitter) == (3, 0.1)
    assert (DELAYED.base, DELAYED.factor, DELAYED.cap) == (60.0, 2.0, 8 * 3600.0)
    assert (DELAYED.max_retries, DELAYED.jitter) == (7, 0.2)


@pytest.mark.parametrize(
    ("attempt", "delay"),
    [(1, 1.0), (2, 2.0), (3, 4.0), (4, None), (5, None), (100, None)],
)
def test_in_process_delays(attempt: int, delay: float | None) -> None:
    decision = NO_JITTER_IN_PROCESS.decide(errors.RetryableError(), attempt)

    if delay is None:
        assert decision is None
    else:
        assert decision == RetryDecision(delay=delay, attempt=attempt + 1)


@pytest.mark.parametrize(
    ("attempt", "delay"),
    [
        (1, 60.0),
        (2, 120.0),
        (3, 240.0),
        (4, 480.0),
        (5, 960.0),
        (6, 1_920.0),
        (7, 3_840.0),
        (8, None),
        (9, None),
    ],
)
def test_delayed_redelivery_delays(attempt: int, delay: float | None) -> None:
    decision = NO_JITTER_DELAYED.decide(RuntimeError("boom"), attempt)

    if delay is None:
        assert decision is None
    else:
        assert decision == RetryDecision(delay=delay, attempt=attempt + 1)


@pytest.mark.parametrize(
    ("retry_no", "delay"),
    [(9, 15_360.0), (10, 28_800.0), (11, 28_800.0), (30, 28_800.0)],
)
def test_delayed_redelivery_is_capped_at_eight_hours(retry_no: int, delay: float) -> None:
    assert DELAYED.delay_for(retry_no) == delay
    patient = dataclasses.replace(NO_JITTER_DELAYED, max_retries=50)
    assert patient.decide(errors.RetryableError(), retry_no) == RetryDecision(delay, retry_no + 1)


def test_in_process_cap_applies() -> None:
    assert [IN_PROCESS.delay_for(n) for n in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]


@pytest.mark.parametrize(("policy", "spread"), [(DELAYED, 0.2), (IN_PROCESS, 0.1)])
@pytest.mark.parametrize("attempt", [1, 3])
def test_jitter_stays_within_its_bounds_and_spreads(
    policy: RetryPolicy, spread: float, attempt: int
) -> None:
    seeded = dataclasses.replace(policy, rng=random.Random(20240601))
    plain = policy.delay_for(attempt)

    delays = []
    for _ in range(5_000):
        decision = seeded.decide(errors.RetryableError(), attempt)
        assert decision is not None
        assert decision.attempt == attempt + 1
        delays.append(decision.delay)

    assert min(delays) >= plain * (1 - spread)
    assert max(delays) <= plain * (1 + spread)
    # The jitter is real: draws cover most of the band on both sides of the plain delay.
    assert min(delays) < plain * (1 - spread * 0.9)
    assert max(delays) > plain * (1 + spread * 0.9)
    assert abs(sum(delays) / len(delays) - plain) < plain * spread * 0.1


def test_a_schedule_takes_the_policys_delays_with_a_fixed_or_drawn_spread() -> None:
    polls = RetryPolicy(base=2.0, factor=2.0, cap=60.0, jitter=0.2, max_retries=0)

    assert [polls.jittered(n, spread=0.0) for n in (1, 2, 5, 6)] == [2.0, 4.0, 32.0, 60.0]
    assert (polls.jittered(1, spread=-1.0), polls.jittered(1, spread=1.0)) == (1.6, 2.4)
    assert polls.jittered(100_000, spread=0.0) == 60.0  # past float range: the cap
    drawn = [polls.jittered(3) for _ in range(1_000)]  # max_retries does not end a schedule
    assert 6.4 <= min(drawn) < 6.6 and 9.4 < max(drawn) <= 9.6


def test_jitter_is_reproducible_with_a_seeded_rng() -> None:
    def draws(seed: int) -> list[float]:
        policy = dataclasses.replace(DELAYED, rng=random.Random(seed))
        out = []
        for attempt in range(1, 8):
            decision = policy.decide(errors.RetryableError(), attempt)
            assert decision is not None
            out.append(decision.delay)
        return out

    assert draws(7) == draws(7)
    assert draws(7) != draws(8)


@pytest.mark.parametrize(
    "error",
    [
        errors.PermanentError(),
        errors.SchemaError(),
        errors.EnvelopeError("key", "empty"),
    ],
)
@pytest.mark.parametrize("policy", [IN_PROCESS, DELAYED])
def test_permanent_errors_are_never_retried(policy: RetryPolicy, error: Exception) -> None:
    assert policy.decide(error, 1) is None


def test_unknown_errors_are_retried_by_default() -> None:
    assert NO_JITTER_IN_PROCESS.decide(ValueError("x"), 1) == RetryDecision(1.0, 2)


def test_retry_unknown_false_retries_only_retryable_errors() -> None:
    strict = dataclasses.replace(NO_JITTER_IN_PROCESS, retry_unknown=False)

    assert strict.decide(ValueError("x"), 1) is None
    assert strict.decide(RuntimeError("x"), 1) is None
    assert strict.decide(errors.RetryableError(), 1) == RetryDecision(1.0, 2)
    assert strict.decide(errors.StaleTransition(), 2) == RetryDecision(2.0, 3)
    assert strict.decide(errors.RetryableError(), 4) is None


# --- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "bases", "not_bases"),
    [
        (errors.RetryableError, (errors.HubError,), (errors.PermanentError,)),
        (
            errors.StaleTransition,
            (errors.RetryableError, errors.HubError),
            (errors.PermanentError,),
        ),
        (errors.PermanentError, (errors.HubError,), (errors.RetryableError,)),
        (
            errors.SchemaError,
            (errors.PermanentError, errors.HubError),
            (errors.RetryableError,),
        ),
        (
            errors.EnvelopeError,
            (errors.PermanentError, errors.HubError),
            (errors.RetryableError,),
        ),
        (
            errors.ConfigurationError,
            (errors.HubError,),
            (errors.RetryableError, errors.PermanentError),
        ),
        (errors.Retry, (errors.HubError,), (errors.RetryableError, errors.PermanentError)),
        (errors.HubError, (Exception,), ()),
    ],
)
def test_error_tree(
    cls: type[Exception], bases: tuple[type[Exception], ...], not_bases: tuple[type, ...]
) -> None:
    for base in bases:
        assert issubclass(cls, base), f"{cls.__name__} should be a {base.__name__}"
    for other in not_bases:
        assert not issubclass(cls, other), f"{cls.__name__} must not be a {other.__name__}"


@pytest.mark.parametrize(
    ("cls", "message"),
    [
        (errors.HubError, "An AIGC Hub error."),
        (errors.RetryableError, "A transient failure; the same work may succeed when tried again."),
        (errors.StaleTransition, errors.StaleTransition.__doc__),
        (errors.PermanentError, errors.PermanentError.__doc__),
        (errors.SchemaError, errors.SchemaError.__doc__),
        (errors.ConfigurationError, errors.ConfigurationError.__doc__),
    ],
)
def test_a_class_docstring_is_its_default_message(cls: type[errors.HubError], message: str) -> None:
    error = cls()

    assert message
    assert error.message == message.strip()
    assert str(error) == message.strip()


def test_an_explicit_message_wins_over_the_docstring() -> None:
    error = errors.SchemaError("unknown event type 'x.y' v3")

    assert error.message == "unknown event type 'x.y' v3"
    assert str(error) == "unknown event type 'x.y' v3"


def test_envelope_error_names_field_and_problem() -> None:
    error = errors.EnvelopeError("payload", "must be an object")

    assert (error.field, error.problem) == ("payload", "must be an object")
    assert error.message == "envelope field 'payload': must be an object"


@pytest.mark.parametrize(
    ("delay", "expected", "text"),
    [(2.5, 2.5, "retry in 2.5s: quota"), (0, 0.0, "retry in 0s: quota"), (-3, 0.0, "retry in 0s")],
)
def test_retry_is_flow_control_with_a_non_negative_delay(
    delay: float, expected: float, text: str
) -> None:
    signal = errors.Retry(delay, "quota")

    assert signal.delay == expected
    assert signal.reason == "quota"
    assert signal.message.startswith(text)
    assert isinstance(signal, errors.HubError)
    assert not isinstance(signal, errors.RetryableError)


def test_retry_has_a_default_reason() -> None:
    assert errors.Retry(1).reason == "deferred"


# --- failpoints -------------------------------------------------------------------------------


def test_crash_at_raises_on_the_nth_hit_only() -> None:
    fp = Failpoints()
    fp.crash_at("relay.after_publish", after=3)

    fp.hit("relay.after_publish")
    fp.hit("relay.after_publish")
    with pytest.raises(Crash, match=r"relay\.after_publish \(hit 3\)"):
        fp.hit("relay.after_publish")
    fp.hit("relay.after_publish")  # once only
    fp.hit("relay.after_publish")

    assert fp.hits["relay.after_publish"] == 5


def test_crash_at_defaults_to_the_first_hit() -> None:
    fp = Failpoints()
    fp.crash_at("x")

    with pytest.raises(Crash):
        fp.hit("x")
    fp.hit("x")


def test_other_names_are_not_affected() -> None:
    fp = Failpoints()
    fp.crash_at("x")

    fp.hit("y")
    fp.hit("x.y")

    assert "x" not in fp.hits


def test_crash_is_a_base_exception_that_except_exception_cannot_swallow() -> None:
    assert issubclass(Crash, BaseException)
    assert not issubclass(Crash, Exception)
    fp = Failpoints()
    fp.crash_at("commit")

    def code_under_test() -> str:
        try:
            fp.hit("commit")
        except Exception:
            return "swallowed"
        return "passed"

    with pytest.raises(Crash):
        code_under_test()


def test_disarm_stops_the_action_and_the_counting() -> None:
    fp = Failpoints()
    fp.crash_at("x", after=2)
    fp.hit("x")
    fp.disarm("x")

    fp.hit("x")
    fp.hit("x")

    assert fp.hits["x"] == 1
    fp.disarm("never-armed")  # harmless


def test_arm_runs_a_custom_action_on_every_hit() -> None:
    fp = Failpoints()
    calls: list[int] = []
    fp.arm("x", lambda: calls.append(1))

    for _ in range(4):
        fp.hit("x")

    assert calls == [1, 1, 1, 1]
    assert fp.hits == {"x": 4}

    def boom() -> None:
        raise errors.RetryableError("injected")

    fp.arm("x", boom)  # re-arming replaces the action
    with pytest.raises(errors.RetryableError, match="injected"):
        fp.hit("x")
    assert calls == [1, 1, 1, 1]


def test_the_shared_none_instance_does_nothing() -> None:
    NONE.hit("relay.after_publish")
    NONE.hit("anything")


def exceptions_outside_the_tree(package: str) -> list[str]:
    """Exception classes defined in ``package``'s modules that do not derive from HubError."""
    root = importlib.import_module(package)
    names = [package]
    if hasattr(root, "__path__"):
        names += [m.name for m in pkgutil.walk_packages(root.__path__, package + ".")]
    found = []
    for name in names:
        module = importlib.import_module(name)
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, Exception)
                and value.__module__ == name
                and not issubclass(value, errors.HubError)
            ):
                found.append(f"{name}.{value.__qualname__}")
    return found


@pytest.mark.parametrize("package", ["aigc_hub.pipelines", "aigc_hub.providers"])
def test_every_exception_a_pipeline_or_provider_defines_is_in_the_hub_tree(package: str) -> None:
    assert exceptions_outside_the_tree(package) == []


def test_the_tree_check_names_a_planted_exception_outside_the_tree(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    planted = types.ModuleType("planted_pipeline")
    exec("class Refused(Exception):\n    pass\n", vars(planted))
    exec("class Fine(KeyError):\n    pass\n", vars(planted))
    planted.Fine.__module__ = "elsewhere"  # imported, not defined here: not this module's
    monkeypatch.setitem(sys.modules, "planted_pipeline", planted)

    assert exceptions_outside_the_tree("planted_pipeline") == ["planted_pipeline.Refused"]
