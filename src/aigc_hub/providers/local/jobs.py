"""The provider's jobs, in memory: one per request key, each change numbered.

Everything here runs on the server's one event loop, so no locks: a method never awaits.
Each change bumps the job's ``sequence`` and moves ``updated_at`` strictly forward, so
observers can order what they see even when deliveries arrive out of order.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

Status = Literal["queued", "running", "succeeded", "failed", "canceled"]
TERMINAL: frozenset[str] = frozenset({"succeeded", "failed", "canceled"})


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """What a client asked for; two submits under one request key must ask the same."""

    request_key: str
    model: str
    mode: str
    prompt: str
    duration_s: int
    width: int
    height: int
    callback_url: str | None = None


@dataclasses.dataclass
class Job:
    """One job's current state (mutated only through :meth:`JobStore.update`)."""

    id: str
    spec: JobSpec
    created_at_ms: int
    updated_at_ms: int
    status: Status = "queued"
    progress: float = 0.0
    sequence: int = 1
    cost: int | None = None
    error: dict[str, str] | None = None
    output_path: Path | None = None
    output_size: int | None = None

    @property
    def terminal(self) -> bool:
        """True once succeeded, failed or canceled: the job never changes again."""
        return self.status in TERMINAL


def iso(ms: int) -> str:
    """RFC 3339 UTC with milliseconds, as vendors print times."""
    stamp = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
    return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def now_ms() -> int:
    """Wall clock, epoch milliseconds."""
    return time.time_ns() // 1_000_000


class JobStore:
    """Jobs by id and by request key; ``on_change`` is called after every change."""

    def __init__(self, on_change: Callable[[Job], None] | None = None) -> None:
        self._jobs: dict[str, Job] = {}
        self._by_key: dict[str, str] = {}
        self.on_change = on_change

    def __len__(self) -> int:
        return len(self._jobs)

    def get(self, job_id: str) -> Job | None:
        """The job, or None."""
        return self._jobs.get(job_id)

    def ids(self) -> list[str]:
        """Job ids in creation order."""
        return list(self._jobs)

    def by_request_key(self, request_key: str) -> list[Job]:
        """The job taken under ``request_key`` (zero or one)."""
        job_id = self._by_key.get(request_key)
        return [self._jobs[job_id]] if job_id else []

    def counts_by_request_key(self) -> dict[str, int]:
        """How many jobs each request key holds (always 1: the idempotency invariant)."""
        counts: dict[str, int] = {}
        for job in self._jobs.values():
            counts[job.spec.request_key] = counts.get(job.spec.request_key, 0) + 1
        return counts

    def create_or_get(self, spec: JobSpec) -> tuple[Job, bool]:
        """``(job, True)`` for a new request key, ``(existing job, False)`` for a known one."""
        existing = self._by_key.get(spec.request_key)
        if existing is not None:
            return self._jobs[existing], False
        stamp = now_ms()
        job = Job(
            id=f"job_{secrets.token_hex(10)}", spec=spec, created_at_ms=stamp, updated_at_ms=stamp
        )
        self._jobs[job.id] = job
        self._by_key[spec.request_key] = job.id
        self._changed(job)
        return job, True

    def update(self, job: Job, **changes: Any) -> bool:
        """Apply ``changes`` unless the job is terminal; returns whether anything changed."""
        if job.terminal:
            return False
        for name, value in changes.items():
            setattr(job, name, value)
        job.sequence += 1
        job.updated_at_ms = max(now_ms(), job.updated_at_ms + 1)
        self._changed(job)
        return True

    def _changed(self, job: Job) -> None:
        if self.on_change is not None:
            self.on_change(job)
