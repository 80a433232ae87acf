"""Client-side mirrors of the API's response bodies (unknown members are kept, not refused)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class _Model(BaseModel):
    # A newer server may add members: keep them rather than fail.
    model_config = ConfigDict(extra="allow")


class Health(_Model):
    """``/healthz`` and ``/readyz``: ``status`` is ``ok``; ``checks`` names what ``readyz`` ran."""

    status: str
    checks: list[str] = []


class DeadLetter(_Model):
    """A dead letter without its bytes (times are epoch ms)."""

    id: int
    event_id: str | None
    event_type: str | None
    tenant_id: str | None
    topic: str
    partition: int | None
    offset: int | None
    key: str | None
    consumer: str
    pipeline: str
    error_class: str
    error_message: str
    attempts: int
    first_failure_at: int
    last_failure_at: int
    status: str
    created_at: int
    resolved_at: int | None


class DeadLetterDetail(DeadLetter):
    """A dead letter with its envelope (or base64 ``raw`` bytes), headers and history."""

    envelope: dict[str, Any] | None
    raw: str | None
    headers: dict[str, str]
    history: list[dict[str, Any]]


class DeadLetterPage(_Model):
    """A page of dead letters, newest first; ``next_cursor`` is ``None`` on the last page."""

    items: list[DeadLetter]
    next_cursor: str | None


class JobAccepted(_Model):
    """A bulk replay was accepted; ``location`` is the job's URL path (``Location`` header)."""

    job_id: str
    status: str
    total: int
    location: str | None = None


class Job(_Model):
    """An admin job's progress; ``status`` is ``queued``, ``running``, ``done`` or ``failed``."""

    id: str
    kind: str
    status: str
    total: int
    done: int
    failed: int
    params: dict[str, Any]
    actor: str
    error: str | None
    created_at: int
    updated_at: int
    finished_at: int | None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED


#: Job statuses after which a job no longer changes.
FINISHED = frozenset({"done", "failed"})


class Dismissed(_Model):
    """How many dead letters changed from pending to dismissed."""

    dismissed: int


class PartitionLag(_Model):
    partition: int
    committed: int
    end_offset: int
    lag: int


class TopicLag(_Model):
    group: str
    topic: str
    lag: int
    oldest_age_s: float
    breached: bool
    partitions: list[PartitionLag]


class Lag(_Model):
    """Lag of every watched consumer group."""

    broker_reachable: bool
    items: list[TopicLag]


class Outbox(_Model):
    """Unpublished outbox rows and the age of the oldest."""

    backlog: int
    oldest_age_s: float


class AuditEntry(_Model):
    id: int
    at: int
    actor: str
    action: str
    target: str
    result: str
    detail: dict[str, Any]


class AuditPage(_Model):
    """Audit entries, newest first."""

    items: list[AuditEntry]


class Notification(_Model):
    """A hint that a subject changed (``GET /v1/events``); the facts are in its snapshot."""

    tenant_id: str
    subject_type: str
    subject_id: str
    kind: str
    status: str | None = None
    stage: str | None = None
    progress: float | None = None
    status_version: int | None = None
    occurred_at_ms: int
    data: dict[str, Any] = {}


#: The states a generation task never leaves.
TERMINAL_TASK_STATUSES = frozenset({"SUCCEEDED", "FAILED", "CANCELED"})


class GenerationTask(_Model):
    """A generation task's snapshot (``GET /v1/generation-tasks/{id}``): the facts."""

    task_id: str
    status: str
    status_version: int
    stage: str
    progress: float | None = None
    mode: str
    model: str
    prompt: str
    duration_s: int
    resolution: str
    priority: int
    attempts: int
    estimated_cost: int
    actual_cost: int | None = None
    result_asset_ids: list[str] = []
    failure_class: str | None = None
    failure_code: str | None = None
    created_at_ms: int
    updated_at_ms: int
    terminal_at_ms: int | None = None

    @property
    def done(self) -> bool:
        """True once the task is SUCCEEDED, FAILED or CANCELED (it never moves again)."""
        return self.status in TERMINAL_TASK_STATUSES


class GenerationTaskPage(_Model):
    """One page of tasks, newest first; pass ``next_cursor`` for the next."""

    items: list[GenerationTask]
    next_cursor: str | None = None


class Credits(_Model):
    """A tenant's credits: available now, and held by tasks not yet settled."""

    available: int
    reserved: int
