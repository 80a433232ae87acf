"""Watchdogs of the generation pipeline (seed 004 §3.10.2): each stuck state past its
deadline gets the command that lets the normal path finish it — never a forged success.

* ``generation-deadlines``: QUEUED too long → FAILED (hold released); DISPATCHING → the
  submit command again (the submitter queries by request key first); SUBMIT_UNKNOWN,
  SUBMITTED/RUNNING without observation → a poll; SUBMIT_UNKNOWN past ``unknown_give_up_s``
  → FAILED (hold and slots released); CANCEL_REQUESTED → cancel again; OUTPUT_FETCHING →
  fetch again; POST_PROCESSING → the media job again (it makes only missing variants).
  Each finding is audited.
* ``generation-output-expiry``, ``generation-orphans``: the media stages' watchdogs
  (:mod:`.media_scanners`).
* ``generation-polls``: emits the polls that ``next_poll_at`` asks for (routine, unaudited).
* ``generation-scheduler``: runs a scheduling pass while tasks wait (lost wake-ups, aging).
* ``generation-slots``: renews the slot permits of every active attempt from the database,
  re-taking those the cache lost.
* ``generation-ledger``: closes reservations of finished tasks neither settled nor released,
  with the entry the normal path would have written (RELEASE, or SETTLE when it charged).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import StaleTransition
from aigc_hub.pipeline import ScannerFactory, StateScannerFactory
from aigc_hub.pipelines.generation import events, media_scanners, records
from aigc_hub.pipelines.generation.handlers.observer import release_slots
from aigc_hub.pipelines.generation.handlers.scheduler import active_attempts, schedule
from aigc_hub.pipelines.generation.ledger import EntryType
from aigc_hub.pipelines.generation.models import (
    credit_ledger,
    generation_tasks,
    provider_jobs,
    task_attempts,
)
from aigc_hub.pipelines.generation.state import Generation
from aigc_hub.pipelines.generation.states import TERMINAL, AttemptStatus, TaskStatus
from aigc_hub.reliability.scanners import Finding
from aigc_hub.store.engine import reader

if TYPE_CHECKING:
    from aigc_hub.bootstrap import Hub

S = TaskStatus
_WATCHED = [S.QUEUED, S.DISPATCHING, S.SUBMIT_UNKNOWN, S.SUBMITTED, S.RUNNING]
_WATCHED += [S.CANCEL_REQUESTED, S.OUTPUT_FETCHING, S.POST_PROCESSING]


def _command(task: dict[str, Any], event_type: str, payload: dict[str, Any]) -> Envelope:
    return Envelope.new(
        event_type,
        payload,
        key=task["id"],
        source="generation.scanner",
        tenant_id=task["tenant_id"],
        correlation_id=task["id"],
    )


@dataclass
class DeadlineScanner:
    gen: Generation
    name: str = "generation-deadlines"
    interval_s: float = 5.0
    batch: int = 200

    @property
    def hub(self) -> Hub:
        """The hub the pipeline's state belongs to."""
        return self.gen.hub

    async def find(self, now_ms: int) -> Sequence[Finding]:
        async with reader(self.hub.engine) as conn:
            rows = await conn.execute(
                sa.select(generation_tasks.c.id, generation_tasks.c.status)
                .where(
                    generation_tasks.c.status.in_([s.value for s in _WATCHED]),
                    generation_tasks.c.deadline_at.is_not(None),
                    generation_tasks.c.deadline_at <= now_ms,
                )
                .order_by(generation_tasks.c.deadline_at)
                .limit(self.batch)
            )
            return [Finding(r.id, {"status": r.status}) for r in rows]

    async def repair(self, finding: Finding, now_ms: int) -> str:
        hub, settings = self.hub, self.gen.settings
        async with hub.transaction() as conn:
            task = await records.load(conn, finding.target)
            if task is None or task["status"] != finding.detail["status"]:
                return "skipped"
            status = S(task["status"])
            if status is S.QUEUED:
                try:
                    notes = await records.move(
                        conn,
                        task,
                        S.FAILED,
                        cause="scanner.queue_timeout",
                        now_ms=now_ms,
                        values={"failure_class": "platform", "failure_code": "queue_timeout"},
                    )
                except StaleTransition:
                    return "skipped"
                await hub.outbox.add(conn, notes)
                return "failed_queue_timeout"
            attempt = await records.load_attempt(conn, task["current_attempt_id"])
            if attempt is None:
                return "skipped"
            unknown_for = now_ms - (attempt.unknown_since or now_ms)
            if status is S.SUBMIT_UNKNOWN and unknown_for >= settings.unknown_give_up_s * 1000:
                return await self._give_up(conn, task, attempt.id, now_ms)
            command, result, wait_s = self._command_for(status, task, attempt, settings)
            await hub.outbox.add(conn, [command])
            await conn.execute(
                sa.update(generation_tasks)
                .where(generation_tasks.c.id == task["id"])
                .values(deadline_at=now_ms + int(wait_s * 1000))
            )
            return result

    async def _give_up(
        self, conn: AsyncConnection, task: dict[str, Any], attempt_id: str, now_ms: int
    ) -> str:
        """SUBMIT_UNKNOWN past ``unknown_give_up_s`` (no lookup could tell): fail the task,
        release its hold and slots, and wake the scheduler."""
        try:
            notes = await records.move(
                conn,
                task,
                S.FAILED,
                cause="scanner.unknown_give_up",
                now_ms=now_ms,
                values={"failure_class": "provider", "failure_code": "submit_unknown"},
            )
        except StaleTransition:
            return "skipped"
        await records.move_attempt(conn, attempt_id, AttemptStatus.FAILED)
        await release_slots(conn, self.gen, attempt_id)
        freed = events.SlotFreed(tenant_id=task["tenant_id"]).model_dump()
        wake = Envelope.new(
            events.SLOT_FREED,
            freed,
            key=f"slots:{task['tenant_id']}",
            source="generation.scanner",
            tenant_id=task["tenant_id"],
            correlation_id=task["id"],
        )
        await self.hub.outbox.add(conn, [*notes, wake])
        return "failed_submit_unknown"

    @staticmethod
    def _command_for(
        status: TaskStatus, task: dict[str, Any], attempt: Any, settings: Any
    ) -> tuple[Envelope, str, float]:
        if status is S.DISPATCHING:
            payload = events.AttemptDispatched(
                task_id=task["id"],
                attempt_id=attempt.id,
                provider=attempt.provider,
                model=attempt.model,
                request_key=attempt.provider_request_key,
            ).model_dump()
            return (
                _command(task, events.ATTEMPT_DISPATCHED, payload),
                "submit_rechecked",
                settings.dispatching_deadline_s,
            )
        if status is S.CANCEL_REQUESTED:
            payload = events.CancelRequested(task_id=task["id"]).model_dump()
            return (
                _command(task, events.CANCEL_REQUESTED, payload),
                "cancel_resent",
                settings.cancel_deadline_s,
            )
        if status is S.POST_PROCESSING:
            processing = events.MediaProcessRequested(
                task_id=task["id"], source_asset_id=task["result_asset_id"]
            ).model_dump()
            return (
                _command(task, events.MEDIA_PROCESS_REQUESTED, processing),
                "media_resent",
                settings.post_processing_deadline_s,
            )
        if status is S.OUTPUT_FETCHING:
            payload = events.FetchRequested(task_id=task["id"], attempt_id=attempt.id).model_dump()
            return (
                _command(task, events.FETCH_REQUESTED, payload),
                "fetch_resent",
                settings.fetch_deadline_s,
            )
        payload = events.PollRequested(task_id=task["id"], attempt_id=attempt.id).model_dump()
        wait = (
            settings.unknown_recheck_s if status is S.SUBMIT_UNKNOWN else settings.running_silence_s
        )
        result = "reconcile_queried" if status is S.SUBMIT_UNKNOWN else "silence_polled"
        return _command(task, events.POLL_REQUESTED, payload), result, wait


@dataclass
class PollScanner:
    gen: Generation
    name: str = "generation-polls"
    interval_s: float = 1.0
    audited: bool = False
    batch: int = 500
    #: How long an emitted poll owns the job before another may be emitted.
    claim_ms: int = 30_000

    @property
    def hub(self) -> Hub:
        """The hub the pipeline's state belongs to."""
        return self.gen.hub

    async def find(self, now_ms: int) -> Sequence[Finding]:
        async with reader(self.hub.engine) as conn:
            rows = await conn.execute(
                sa.select(provider_jobs.c.id, provider_jobs.c.task_id, provider_jobs.c.attempt_id)
                .join(generation_tasks, generation_tasks.c.id == provider_jobs.c.task_id)
                .where(
                    provider_jobs.c.next_poll_at.is_not(None),
                    provider_jobs.c.next_poll_at <= now_ms,
                    generation_tasks.c.current_attempt_id == provider_jobs.c.attempt_id,
                    generation_tasks.c.status.not_in([s.value for s in TERMINAL]),
                )
                .order_by(provider_jobs.c.next_poll_at)
                .limit(self.batch)
            )
            return [Finding(r.task_id, {"job": r.id, "attempt_id": r.attempt_id}) for r in rows]

    async def repair(self, finding: Finding, now_ms: int) -> str:
        async with self.hub.transaction() as conn:
            claimed = (
                await conn.execute(
                    sa.update(provider_jobs)
                    .where(
                        provider_jobs.c.id == finding.detail["job"],
                        provider_jobs.c.next_poll_at <= now_ms,
                    )
                    .values(next_poll_at=now_ms + self.claim_ms)
                    .returning(provider_jobs.c.tenant_id)
                )
            ).scalar_one_or_none()
            if claimed is None:
                return "skipped"
            task = {"id": finding.target, "tenant_id": claimed}
            payload = events.PollRequested(
                task_id=finding.target, attempt_id=finding.detail["attempt_id"]
            ).model_dump()
            await self.hub.outbox.add(conn, [_command(task, events.POLL_REQUESTED, payload)])
        return "poll_requested"


@dataclass
class SchedulerScanner:
    gen: Generation
    name: str = "generation-scheduler"
    interval_s: float = 2.0
    audited: bool = False

    @property
    def hub(self) -> Hub:
        """The hub the pipeline's state belongs to."""
        return self.gen.hub

    async def find(self, now_ms: int) -> Sequence[Finding]:
        async with reader(self.hub.engine) as conn:
            waiting = (
                await conn.execute(
                    sa.select(generation_tasks.c.id)
                    .where(generation_tasks.c.status == S.QUEUED.value)
                    .limit(1)
                )
            ).first()
        return [Finding("queue", {})] if waiting else []

    async def repair(self, finding: Finding, now_ms: int) -> str:
        return f"dispatched:{await schedule(self.gen)}"


@dataclass
class SlotScanner:
    gen: Generation
    name: str = "generation-slots"
    interval_s: float = 20.0
    audited: bool = False

    @property
    def hub(self) -> Hub:
        """The hub the pipeline's state belongs to."""
        return self.gen.hub

    async def find(self, now_ms: int) -> Sequence[Finding]:
        return [Finding(a["id"], {"slots": a["slots"]}) for a in await active_attempts(self.hub)]

    async def repair(self, finding: Finding, now_ms: int) -> str:
        gen = self.gen
        before = list(finding.detail["slots"] or [])
        held = await gen.slots.renew(finding.target, before)
        if held != before:
            async with self.hub.transaction() as conn:
                await conn.execute(
                    sa.update(task_attempts)
                    .where(task_attempts.c.id == finding.target)
                    .values(slots=held)
                )
            return "slots_retaken"
        return "renewed"


@dataclass
class LedgerScanner:
    hub: Hub
    name: str = "generation-ledger"
    interval_s: float = 60.0
    grace_ms: int = 60_000

    async def find(self, now_ms: int) -> Sequence[Finding]:
        closed = sa.select(credit_ledger.c.task_id).where(
            credit_ledger.c.type.in_([EntryType.SETTLE.value, EntryType.RELEASE.value])
        )
        async with reader(self.hub.engine) as conn:
            rows = await conn.execute(
                sa.select(credit_ledger.c.task_id, credit_ledger.c.amount)
                .join(generation_tasks, generation_tasks.c.id == credit_ledger.c.task_id)
                .where(
                    credit_ledger.c.type == EntryType.RESERVE.value,
                    generation_tasks.c.status.in_([s.value for s in TERMINAL]),
                    generation_tasks.c.terminal_at < now_ms - self.grace_ms,
                    credit_ledger.c.task_id.not_in(closed),
                )
                .limit(100)
            )
            return [Finding(r.task_id, {"reserved": int(r.amount)}) for r in rows]

    async def repair(self, finding: Finding, now_ms: int) -> str:
        """Append the closing entry the normal path would have: same rule, same business key,
        so a late normal close and this repair cannot both write. The runner audits it."""
        async with self.hub.transaction() as conn:
            task = await records.load(conn, finding.target)
            if task is None or not S(task["status"]).terminal:
                return "skipped"
            kind, written = await records.close_ledger(
                conn, task, S(task["status"]), now_ms, actual_cost=task["actual_cost"]
            )
        if not written:
            return "skipped"  # closed meanwhile by the normal path
        return "settled" if kind is EntryType.SETTLE else "released"


def factories() -> list[ScannerFactory]:
    """The pipeline's scanners built from the hub alone."""
    return [LedgerScanner]


def state_factories() -> list[StateScannerFactory[Generation]]:
    """The pipeline's scanners built from its state (``Pipeline.scanner_with_state``)."""
    return [
        DeadlineScanner,
        PollScanner,
        SchedulerScanner,
        SlotScanner,
        media_scanners.ExpiryScanner,
        media_scanners.OrphanScanner,
    ]
