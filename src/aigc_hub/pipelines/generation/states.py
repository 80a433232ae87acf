"""Task and attempt states and the moves allowed between them (seed 004 §3.6–3.7).

Generation's tables for the backbone's :class:`~aigc_hub.core.states.StateMachine`: a
transition not in :data:`TRANSITIONS` never happens; a terminal state has no way out, so an
old event arriving after the end changes nothing.
"""

from __future__ import annotations

import enum

from aigc_hub.core.states import StateMachine


class TaskStatus(enum.StrEnum):
    QUEUED = "QUEUED"
    DISPATCHING = "DISPATCHING"
    SUBMITTED = "SUBMITTED"
    SUBMIT_UNKNOWN = "SUBMIT_UNKNOWN"
    RUNNING = "RUNNING"
    OUTPUT_FETCHING = "OUTPUT_FETCHING"
    POST_PROCESSING = "POST_PROCESSING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCEL_REQUESTED = "CANCEL_REQUESTED"
    CANCELED = "CANCELED"

    @property
    def terminal(self) -> bool:
        """True for a state the task never leaves."""
        return self in TERMINAL


S = TaskStatus

TERMINAL = frozenset({S.SUCCEEDED, S.FAILED, S.CANCELED})

#: from -> the states it may move to.
TRANSITIONS: dict[TaskStatus, frozenset[TaskStatus]] = {
    S.QUEUED: frozenset({S.DISPATCHING, S.CANCELED, S.FAILED}),
    # DISPATCHING -> QUEUED: the provider confirmed it never took the submit (retry allowed).
    S.DISPATCHING: frozenset(
        {
            S.SUBMITTED,
            S.RUNNING,
            S.OUTPUT_FETCHING,
            S.SUBMIT_UNKNOWN,
            S.QUEUED,
            S.FAILED,
            S.CANCEL_REQUESTED,
        }
    ),
    S.SUBMIT_UNKNOWN: frozenset(
        {S.SUBMITTED, S.RUNNING, S.OUTPUT_FETCHING, S.QUEUED, S.FAILED, S.CANCEL_REQUESTED}
    ),
    S.SUBMITTED: frozenset({S.RUNNING, S.OUTPUT_FETCHING, S.FAILED, S.CANCEL_REQUESTED}),
    S.RUNNING: frozenset({S.OUTPUT_FETCHING, S.FAILED, S.CANCEL_REQUESTED}),
    S.OUTPUT_FETCHING: frozenset({S.POST_PROCESSING, S.FAILED}),
    # The media worker ends it: every required variant made and the output review passed
    # (SUCCEEDED), or the review rejected it or the output cannot be processed (FAILED).
    S.POST_PROCESSING: frozenset({S.SUCCEEDED, S.FAILED}),
    # The provider's answer decides: it finished anyway (success wins) or it stopped; a job
    # that failed after the tenant asked to stop ends CANCELED too (seed §3.7.2: "by business
    # rule deemed canceled"), so no cancel ends FAILED.
    S.CANCEL_REQUESTED: frozenset({S.CANCELED, S.OUTPUT_FETCHING}),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELED: frozenset(),
}

#: States a cancel request is accepted in (seed §3.7.2).
CANCELABLE = frozenset({S.QUEUED, S.DISPATCHING, S.SUBMITTED, S.SUBMIT_UNKNOWN, S.RUNNING})

#: States in which a provider job exists or may exist (slots are held, polling may run).
ACTIVE_AT_PROVIDER = frozenset({S.DISPATCHING, S.SUBMITTED, S.SUBMIT_UNKNOWN, S.RUNNING})

#: The user-facing stage of each state.
STAGE: dict[TaskStatus, str] = {
    S.QUEUED: "queued",
    S.DISPATCHING: "dispatching",
    S.SUBMITTED: "generating",
    S.SUBMIT_UNKNOWN: "generating",
    S.RUNNING: "generating",
    S.OUTPUT_FETCHING: "fetching_output",
    S.POST_PROCESSING: "post_processing",
    S.SUCCEEDED: "done",
    S.FAILED: "done",
    S.CANCEL_REQUESTED: "canceling",
    S.CANCELED: "done",
}


#: The task's state machine (checked by every :func:`~.records.move`).
TASKS = StateMachine("generation_task", TRANSITIONS, TERMINAL)


class AttemptStatus(enum.StrEnum):
    """Where one try at a provider stands (``task_attempts.status``)."""

    DISPATCHING = "DISPATCHING"
    SUBMIT_UNKNOWN = "SUBMIT_UNKNOWN"
    SUBMITTED = "SUBMITTED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELED = "CANCELED"
    NOT_ACCEPTED = "NOT_ACCEPTED"


A = AttemptStatus

#: How an attempt ends: the provider's final answer, or NOT_ACCEPTED when it confirms it
#: never took the submit (only then may another attempt start).
_ATTEMPT_ENDS = frozenset({A.SUCCEEDED, A.FAILED, A.CANCELED, A.NOT_ACCEPTED})

#: The attempt's state machine; attempts keep no history table (the task's history tells).
ATTEMPTS = StateMachine(
    "generation_attempt",
    {
        A.DISPATCHING: frozenset({A.SUBMIT_UNKNOWN, A.SUBMITTED} | _ATTEMPT_ENDS),
        A.SUBMIT_UNKNOWN: frozenset({A.SUBMITTED} | _ATTEMPT_ENDS),
        A.SUBMITTED: _ATTEMPT_ENDS,
        A.SUCCEEDED: frozenset(),
        A.FAILED: frozenset(),
        A.CANCELED: frozenset(),
        A.NOT_ACCEPTED: frozenset(),
    },
    _ATTEMPT_ENDS,
)


def sources_of(target: TaskStatus) -> frozenset[TaskStatus]:
    """Every state from which ``target`` may be reached (the guarded update's ``allowed_from``)."""
    return TASKS.sources_of(target)


def can_move(current: TaskStatus, target: TaskStatus) -> bool:
    """True when the task may move from ``current`` to ``target``."""
    return TASKS.can(current, target)
