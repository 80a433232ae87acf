"""The backbone's StateMachine value: pure table tests, no database."""

from __future__ import annotations

import enum

import pytest

from aigc_hub.core.errors import HubError, StaleTransition
from aigc_hub.core.states import StateMachine, TransitionNotAllowed
from aigc_hub.pipelines.generation.states import (
    ATTEMPTS,
    TASKS,
    TERMINAL,
    TRANSITIONS,
    AttemptStatus,
)


class Job(enum.StrEnum):
    NEW = "NEW"
    RUNNING = "RUNNING"
    DONE = "DONE"
    FAILED = "FAILED"


J = Job

JOBS = StateMachine(
    "job",
    {
        J.NEW: frozenset({J.RUNNING, J.FAILED}),
        J.RUNNING: frozenset({J.DONE, J.FAILED}),
        J.DONE: frozenset(),
        J.FAILED: frozenset(),
    },
    frozenset({J.DONE, J.FAILED}),
)


@pytest.mark.parametrize(
    ("current", "target", "allowed"),
    [
        (J.NEW, J.RUNNING, True),
        (J.NEW, J.FAILED, True),
        (J.NEW, J.DONE, False),  # no skipping the work
        (J.RUNNING, J.DONE, True),
        (J.RUNNING, J.NEW, False),  # no way back
        (J.RUNNING, J.RUNNING, False),  # a self-move is not a move
        (J.DONE, J.FAILED, False),  # terminal: a late failure changes nothing
        (J.FAILED, J.RUNNING, False),
    ],
)
def test_can_and_check_follow_the_table(current: Job, target: Job, allowed: bool) -> None:
    assert JOBS.can(current, target) is allowed
    if allowed:
        JOBS.check(current, target)
    else:
        with pytest.raises(TransitionNotAllowed, match=f"job: {current} -> {target} is not"):
            JOBS.check(current, target)


def test_a_forbidden_move_is_a_stale_transition_of_the_hub_error_tree() -> None:
    with pytest.raises(StaleTransition) as caught:
        JOBS.check(J.DONE, J.RUNNING)
    assert isinstance(caught.value, HubError)
    assert (caught.value.machine, caught.value.current, caught.value.target) == (
        "job",
        "DONE",
        "RUNNING",
    )


def test_terminal_states_sources_and_pairs() -> None:
    assert JOBS.states == frozenset(Job)
    assert [s for s in Job if JOBS.is_terminal(s)] == [J.DONE, J.FAILED]
    assert JOBS.sources_of(J.FAILED) == {J.NEW, J.RUNNING}
    assert JOBS.sources_of(J.NEW) == frozenset()
    assert JOBS.pairs() == {
        (J.NEW, J.RUNNING),
        (J.NEW, J.FAILED),
        (J.RUNNING, J.DONE),
        (J.RUNNING, J.FAILED),
    }


def test_a_state_without_an_entry_is_refused() -> None:
    with pytest.raises(ValueError, match=r"job: no entry for \['FAILED'\]"):
        StateMachine(
            "job",
            {J.NEW: frozenset({J.DONE}), J.RUNNING: frozenset(), J.DONE: frozenset()},
            frozenset({J.DONE}),
        )


def test_a_terminal_state_with_a_way_out_is_refused() -> None:
    moves = {
        J.NEW: frozenset({J.DONE}),
        J.RUNNING: frozenset(),
        J.DONE: frozenset({J.NEW}),
        J.FAILED: frozenset(),
    }
    with pytest.raises(ValueError, match="terminal DONE has moves"):
        StateMachine("job", moves, frozenset({J.DONE}))


class Other(enum.StrEnum):
    ELSEWHERE = "ELSEWHERE"


def test_a_move_to_a_state_of_another_machine_is_refused() -> None:
    moves = {
        J.NEW: frozenset({Other.ELSEWHERE}),
        J.RUNNING: frozenset(),
        J.DONE: frozenset(),
        J.FAILED: frozenset(),
    }
    with pytest.raises(ValueError, match=r"NEW moves to unknown \['ELSEWHERE'\]"):
        StateMachine("job", moves, frozenset({J.DONE}))  # type: ignore[arg-type]


def test_an_empty_machine_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one state"):
        StateMachine[Job]("job", {}, frozenset())


def test_generation_declares_its_task_table_as_a_machine() -> None:
    assert TASKS.pairs() == {(a, b) for a, targets in TRANSITIONS.items() for b in targets}
    assert TASKS.terminal == TERMINAL


@pytest.mark.parametrize(
    ("current", "target", "allowed"),
    [
        (AttemptStatus.DISPATCHING, AttemptStatus.SUBMIT_UNKNOWN, True),
        (AttemptStatus.SUBMIT_UNKNOWN, AttemptStatus.SUBMITTED, True),
        (AttemptStatus.SUBMITTED, AttemptStatus.SUCCEEDED, True),
        (AttemptStatus.SUBMITTED, AttemptStatus.NOT_ACCEPTED, True),
        (AttemptStatus.SUBMITTED, AttemptStatus.SUBMIT_UNKNOWN, False),
        (AttemptStatus.SUCCEEDED, AttemptStatus.FAILED, False),
        (AttemptStatus.NOT_ACCEPTED, AttemptStatus.SUBMITTED, False),
    ],
)
def test_generation_attempts_have_their_own_machine(
    current: AttemptStatus, target: AttemptStatus, allowed: bool
) -> None:
    assert ATTEMPTS.can(current, target) is allowed
