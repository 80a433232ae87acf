"""Commands and queries of generation tasks, each one unit of work (HTTP, the CLI and
scanners share them).

``create_task`` is the seed's §3.6.2 in one transaction: task row, RESERVE ledger row,
``TaskQueued`` in the outbox. Tenant, status and cost never come from the request body.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

import pydantic
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub import moderation
from aigc_hub.core import errors, ids
from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import StaleTransition
from aigc_hub.pipelines.generation import assets, events, ledger, records
from aigc_hub.pipelines.generation.adapters.base import CapabilityError, ProviderResult
from aigc_hub.pipelines.generation.models import (
    callback_events,
    generation_tasks,
    provider_jobs,
    task_attempts,
    task_events,
)
from aigc_hub.pipelines.generation.requests import request_of
from aigc_hub.pipelines.generation.state import Generation
from aigc_hub.pipelines.generation.states import CANCELABLE, STAGE, TaskStatus
from aigc_hub.store import tables
from aigc_hub.store.dialects import dialect_of
from aigc_hub.store.engine import reader

if TYPE_CHECKING:
    from aigc_hub.bootstrap import Hub

Mode = Literal["text_to_video", "image_to_video"]
#: Called with the creating transaction's connection and the new task's snapshot, after the
#: writes and before the commit; it may write too, and raising rolls everything back.
BeforeCommit = Callable[[AsyncConnection, dict[str, Any]], Awaitable[None]]
#: Where a test makes a create fail after its ``before_commit`` hook, inside the transaction.
AFTER_HOOK = "generation.create_task.after_hook"


class CreateTask(pydantic.BaseModel):
    """What a tenant may ask for; everything else (tenant, status, cost) is the server's."""

    model_config = pydantic.ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "mode": "text_to_video",
                    "model": "local-v1",
                    "prompt": "a paper boat on a rainy street, 一只纸船",
                    "duration_s": 2,
                    "resolution": "320x180",
                    "priority": 50,
                }
            ]
        },
    )

    mode: Mode = "text_to_video"
    model: str = pydantic.Field(min_length=1, max_length=100)
    prompt: str = pydantic.Field(min_length=1, max_length=2000)
    duration_s: int = pydantic.Field(ge=1, le=60)
    resolution: str = pydantic.Field(pattern=r"^[1-9][0-9]{1,4}x[1-9][0-9]{1,4}$")
    reference_asset_ids: list[str] = pydantic.Field(default_factory=list, max_length=4)
    priority: int = pydantic.Field(50, ge=0, le=100)
    project_id: str | None = pydantic.Field(None, max_length=36)


class TaskSnapshot(pydantic.BaseModel):
    """A task as its tenant sees it: facts only, never a provider's raw error or a URL."""

    model_config = pydantic.ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "task_id": "0193a1b2-7c3d-7e4f-8a9b-0c1d2e3f4a5b",
                    "status": "RUNNING",
                    "status_version": 3,
                    "stage": "generating",
                    "progress": 0.5,
                    "mode": "text_to_video",
                    "model": "local-v1",
                    "prompt": "a paper boat on a rainy street, 一只纸船",
                    "duration_s": 2,
                    "resolution": "320x180",
                    "priority": 50,
                    "attempts": 1,
                    "estimated_cost": 4,
                    "actual_cost": None,
                    "result_asset_ids": [],
                    "failure_class": None,
                    "failure_code": None,
                    "created_at_ms": 1764460800000,
                    "updated_at_ms": 1764460803000,
                    "terminal_at_ms": None,
                }
            ]
        }
    )

    task_id: str
    status: str = pydantic.Field(description="QUEUED … SUCCEEDED | FAILED | CANCELED")
    status_version: int = pydantic.Field(description="grows with every transition")
    stage: str = pydantic.Field(description="queued, generating, fetching_output, done…")
    progress: float | None = pydantic.Field(None, ge=0, le=1)
    mode: str
    model: str
    prompt: str
    duration_s: int
    resolution: str
    priority: int
    attempts: int
    estimated_cost: int = pydantic.Field(description="credits reserved at creation")
    actual_cost: int | None = pydantic.Field(None, description="credits charged, once known")
    result_asset_ids: list[str]
    failure_class: str | None = None
    failure_code: str | None = None
    created_at_ms: int
    updated_at_ms: int
    terminal_at_ms: int | None = None


class TaskPage(pydantic.BaseModel):
    """Tasks newest first; ``next_cursor`` fetches the next page (None on the last)."""

    items: list[TaskSnapshot]
    next_cursor: str | None = None


class CreditBalance(pydantic.BaseModel):
    """Available credits, and credits held by tasks not yet settled or released."""

    available: int
    reserved: int


class TaskNotFound(errors.NotFound):
    """No task with this id for this tenant (another tenant's ids look the same)."""


class CannotCancel(errors.Conflict):
    """The task already finished."""

    def __init__(self, status: str) -> None:
        self.status = status
        super().__init__(f"the task is {status}; it can no longer be canceled")


#: Prompt verdicts that stop a task (a watermark verdict lets it go on, marked).
REFUSED = frozenset({moderation.Verdict.REJECT, moderation.Verdict.HUMAN_REVIEW})


class ContentRejected(errors.PermanentError):
    """The prompt review refused the task (reject, or held for human review)."""

    def __init__(self, decision: moderation.Decision) -> None:
        super().__init__(decision.reason)
        self.decision = decision


class InvalidRequest(errors.InvalidInput):
    """A field names something unavailable (unsupported model, missing asset…)."""


def _normalized(body: CreateTask) -> dict[str, Any]:
    width, height = (int(v) for v in body.resolution.split("x"))
    return {
        "prompt": body.prompt,
        "duration_s": body.duration_s,
        "width": width,
        "height": height,
        "resolution": body.resolution,
        "reference_asset_ids": list(body.reference_asset_ids),
    }


async def create_task(
    gen: Generation,
    *,
    tenant_id: str,
    body: CreateTask,
    idempotency_key: str,
    user_id: str | None = None,
    before_commit: BeforeCommit | None = None,
) -> dict[str, Any]:
    """Validate, estimate, reserve and queue; returns the task snapshot.

    Raises InvalidRequest (422), ContentRejected (422: the prompt review refused it; the
    decision is recorded, nothing else), ModerationUnavailable (the review could not run:
    no task is made without one, seed 004 §3.10), ledger.InsufficientCredits (402). The same
    ``(tenant, idempotency_key)`` returns the existing task instead of a second one (without
    calling ``before_commit``). ``before_commit`` runs last in the creating transaction
    (the HTTP route stores its Idempotency-Key answer there); what it raises rolls the
    create back and propagates.
    """
    hub = gen.hub
    params = _normalized(body)
    task_id = ids.new_id_str()
    now = hub.clock.now_ms()
    row: dict[str, Any] = {
        "id": task_id,
        "tenant_id": tenant_id,
        "user_id": user_id,
        "project_id": body.project_id,
        "idempotency_key": idempotency_key,
        "mode": body.mode,
        "requested_model": body.model,
        "normalized_params": params,
        "status": TaskStatus.QUEUED.value,
        "status_version": 0,
        "priority": body.priority,
        "attempt_count": 0,
        "created_at": now,
        "updated_at": now,
        "queued_at": now,
        "deadline_at": now + int(gen.settings.queued_deadline_s * 1000),
        # written as NULL, listed so the row is the whole snapshot (no read-back below)
        "progress": None,
        "actual_cost": None,
        "result_asset_id": None,
        "failure_class": None,
        "failure_code": None,
        "terminal_at": None,
    }
    try:
        routes = gen.providers.candidates(request_of(row))
    except CapabilityError as exc:
        raise InvalidRequest(exc.field, str(exc)) from None
    cost = routes[0].estimated_cost
    row |= {"estimated_cost": cost, "reserved_amount": cost}
    # Input review before anything is held (seed 004 §3.6.2): a refusal costs the tenant
    # nothing and leaves only the decision behind.
    review = await gen.moderation.review_text(body.prompt, tenant_id=tenant_id)
    if review.verdict in REFUSED:
        async with hub.transaction() as conn:
            await _record_review(conn, review, tenant_id, task_id, now)
        raise ContentRejected(review)
    queued = Envelope.new(
        events.TASK_QUEUED,
        events.TaskQueued(task_id=task_id, priority=body.priority).model_dump(),
        key=task_id,
        source="generation.api",
        tenant_id=tenant_id,
        correlation_id=task_id,
    )

    async def write(conn: AsyncConnection) -> dict[str, Any]:
        if body.reference_asset_ids:
            # Checked where the task is written: an asset deleted a moment earlier fails.
            await assets.check_reference_assets(conn, tenant_id, body.reference_asset_ids)
        # Parameters at execute time: the compiled INSERT is cached (hot path of the API).
        await conn.execute(generation_tasks.insert(), row)
        await _record_review(conn, review, tenant_id, task_id, now)
        await ledger.reserve(
            conn, tenant_id=tenant_id, task_id=task_id, amount=cost, now_ms=now, user_id=user_id
        )
        await conn.execute(
            task_events.insert(),
            {
                "task_id": task_id,
                "tenant_id": tenant_id,
                "from_status": None,
                "to_status": TaskStatus.QUEUED.value,
                "status_version": 0,
                "cause": "api.create",
                "cause_id": queued.event_id,
                "detail": {"estimated_cost": cost, "model": body.model},
                "at": now,
            },
        )
        note = records.status_notification(row, TaskStatus.QUEUED, 0, now)
        await hub.outbox.add(conn, [queued, note])
        created = snapshot(row, attempts=0)
        if before_commit is not None:
            await before_commit(conn, created)
            hub.failpoints.hit(AFTER_HOOK)
        return created

    try:
        # Database work only: creates arriving together share one commit (service_call).
        created = await hub.service_call(write)
    except InvalidRequest:
        raise
    except errors.InvalidInput as exc:  # a reference asset not usable: nothing was written
        raise InvalidRequest(exc.field, str(exc)) from None
    except sa.exc.IntegrityError:
        existing = await _by_idempotency_key(hub, tenant_id, idempotency_key)
        if existing is None:
            raise
        return existing
    # The row just committed is the snapshot: no read-back (the hot path of the API).
    return created


async def _record_review(
    conn: AsyncConnection, review: moderation.Decision, tenant_id: str, task_id: str, now: int
) -> None:
    """The prompt review's decision, under the task id it was made for (the task exists only
    when the prompt was allowed)."""
    await moderation.record(
        conn,
        review,
        tenant_id=tenant_id,
        subject_kind="prompt",
        subject_id=task_id,
        stage="input",
        now_ms=now,
    )


async def _by_idempotency_key(hub: Hub, tenant_id: str, key: str) -> dict[str, Any] | None:
    async with reader(hub.engine) as conn:
        found = (
            await conn.execute(
                sa.select(generation_tasks.c.id).where(
                    generation_tasks.c.tenant_id == tenant_id,
                    generation_tasks.c.idempotency_key == key,
                )
            )
        ).scalar_one_or_none()
    return None if found is None else await get_task(hub, tenant_id=tenant_id, task_id=found)


def snapshot(task: Mapping[str, Any], attempts: int, hot: float | None = None) -> dict[str, Any]:
    """The public view of a task: no provider raw error, no temporary URL. ``hot`` is the
    cache's progress, newer than the row's while the task runs (the row keeps key stages)."""
    status = TaskStatus(task["status"])
    params = task["normalized_params"]
    progress = task["progress"]
    if status is TaskStatus.SUCCEEDED:
        progress = 1.0
    elif hot is not None and not status.terminal and hot > (progress or 0):
        progress = hot
    return {
        "task_id": task["id"],
        "status": status.value,
        "status_version": int(task["status_version"]),
        "stage": STAGE[status],
        "progress": progress,
        "mode": task["mode"],
        "model": task["requested_model"],
        "prompt": params["prompt"],
        "duration_s": params["duration_s"],
        "resolution": params["resolution"],
        "priority": task["priority"],
        "attempts": attempts,
        "estimated_cost": task["estimated_cost"],
        "actual_cost": task["actual_cost"],
        "result_asset_ids": [task["result_asset_id"]] if task["result_asset_id"] else [],
        "failure_class": task["failure_class"],
        "failure_code": task["failure_code"],
        "created_at_ms": task["created_at"],
        "updated_at_ms": task["updated_at"],
        "terminal_at_ms": task["terminal_at"],
    }


async def get_task(hub: Hub, *, tenant_id: str, task_id: str) -> dict[str, Any]:
    """The task's snapshot; TaskNotFound for unknown ids and other tenants' ids alike."""
    async with reader(hub.engine) as conn:
        task = await records.load(conn, task_id)
        if task is None or task["tenant_id"] != tenant_id:
            raise TaskNotFound(task_id)
        attempts = (
            await conn.execute(sa.select(sa.func.count()).where(task_attempts.c.task_id == task_id))
        ).scalar_one()
    hot = await records.hot_progress(hub.cache, [task_id])
    return snapshot(task, int(attempts), hot.get(task_id))


async def list_tasks(
    hub: Hub,
    *,
    tenant_id: str,
    status: str | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> tuple[list[dict[str, Any]], str | None]:
    """Newest first; ``cursor`` is the last task id of the previous page."""
    query = sa.select(generation_tasks).where(generation_tasks.c.tenant_id == tenant_id)
    if status:
        query = query.where(generation_tasks.c.status == status)
    async with reader(hub.engine) as conn:
        if cursor:
            after = await records.load(conn, cursor)
            if after is None or after["tenant_id"] != tenant_id:
                raise TaskNotFound(cursor)
            query = query.where(
                sa.tuple_(generation_tasks.c.created_at, generation_tasks.c.id)
                < sa.tuple_(sa.literal(after["created_at"]), sa.literal(after["id"]))
            )
        rows = (
            await conn.execute(
                query.order_by(
                    generation_tasks.c.created_at.desc(), generation_tasks.c.id.desc()
                ).limit(limit + 1)
            )
        ).all()
    running = [r.id for r in rows[:limit] if not TaskStatus(r.status).terminal]
    hot = await records.hot_progress(hub.cache, running)
    page = [snapshot(dict(r._mapping), int(r.attempt_count), hot.get(r.id)) for r in rows[:limit]]
    return page, (page[-1]["task_id"] if len(rows) > limit else None)


async def cancel_task(gen: Generation, *, tenant_id: str, task_id: str) -> dict[str, Any]:
    """Cancel: a QUEUED task ends CANCELED (hold released); one at a provider becomes
    CANCEL_REQUESTED and the provider is asked to stop. Repeating it is harmless."""
    hub = gen.hub
    for _ in range(5):  # re-read and decide again when another writer moved the task
        async with reader(hub.engine) as conn:
            task = await records.load(conn, task_id)
        if task is None or task["tenant_id"] != tenant_id:
            raise TaskNotFound(task_id)
        status = TaskStatus(task["status"])
        if status is TaskStatus.CANCEL_REQUESTED or status is TaskStatus.CANCELED:
            return await get_task(hub, tenant_id=tenant_id, task_id=task_id)
        if status not in CANCELABLE:
            raise CannotCancel(status.value)
        now = hub.clock.now_ms()
        try:
            async with hub.transaction() as conn:
                if status is TaskStatus.QUEUED:
                    notes = await records.move(
                        conn, task, TaskStatus.CANCELED, cause="api.cancel", now_ms=now
                    )
                    await hub.outbox.add(conn, notes)
                else:
                    notes = await records.move(
                        conn,
                        task,
                        TaskStatus.CANCEL_REQUESTED,
                        cause="api.cancel",
                        now_ms=now,
                        deadline_ms=now + int(gen.settings.cancel_deadline_s * 1000),
                    )
                    ask = Envelope.new(
                        events.CANCEL_REQUESTED,
                        events.CancelRequested(task_id=task_id).model_dump(),
                        key=task_id,
                        source="generation.api",
                        tenant_id=tenant_id,
                        correlation_id=task_id,
                    )
                    await hub.outbox.add(conn, [ask, *notes])
        except StaleTransition:
            continue
        return await get_task(hub, tenant_id=tenant_id, task_id=task_id)
    raise StaleTransition(f"task {task_id} kept changing; try again")


async def grant_credits(hub: Hub, *, tenant_id: str, amount: int, grant_id: str) -> ledger.Balance:
    """Top up a tenant; the same ``grant_id`` twice grants once."""
    async with hub.transaction() as conn:
        await ledger.grant(
            conn, tenant_id=tenant_id, amount=amount, grant_id=grant_id, now_ms=hub.clock.now_ms()
        )
        return await ledger.balance(conn, tenant_id)


class UnknownTenant(errors.NotFound):
    """No tenant has this id."""

    def __init__(self, tenant_id: str) -> None:
        self.tenant_id = tenant_id
        super().__init__(f"no tenant {tenant_id!r}")


class GrantIdTaken(errors.Conflict):
    """The grant id already granted credits to another tenant."""

    def __init__(self, grant_id: str, other_tenant_id: str) -> None:
        self.grant_id = grant_id
        self.other_tenant_id = other_tenant_id
        super().__init__(f"grant id {grant_id!r} was already used for tenant {other_tenant_id}")


async def grant_to_tenant(
    hub: Hub, *, tenant_id: str, amount: int, grant_id: str
) -> tuple[ledger.Balance, bool]:
    """Top up an existing tenant; returns its balance and whether this call added credits
    (False: this tenant already had ``grant_id``). Raises UnknownTenant, or GrantIdTaken when
    another tenant has ``grant_id``; nothing is written then."""
    async with hub.transaction() as conn:
        known = await conn.execute(
            sa.select(tables.tenants.c.id).where(tables.tenants.c.id == tenant_id)
        )
        if known.scalar_one_or_none() is None:
            raise UnknownTenant(tenant_id)
        added = await ledger.grant(
            conn, tenant_id=tenant_id, amount=amount, grant_id=grant_id, now_ms=hub.clock.now_ms()
        )
        if not added:
            recipient = await ledger.grant_recipient(conn, grant_id)
            if recipient is not None and recipient != tenant_id:
                raise GrantIdTaken(grant_id, recipient)
        return await ledger.balance(conn, tenant_id), added


async def credit_balance(hub: Hub, tenant_id: str) -> ledger.Balance:
    async with reader(hub.engine) as conn:
        return await ledger.balance(conn, tenant_id)


CallbackOutcome = Literal["accepted", "duplicate", "unmatched"]


async def record_callback(
    gen: Generation, *, provider: str, webhook_id: str, body: bytes, result: ProviderResult
) -> CallbackOutcome:
    """Archive one verified webhook (deduplicated by its id) and, when its job is ours, stage
    its ``StatusObserved`` in the outbox, in one transaction; what became of it.

    Three statements: the job is looked up first, so the archive row is written once with
    its final status (``applied`` or ``unmatched``); a duplicate's insert writes nothing.
    """
    hub = gen.hub
    now = hub.clock.now_ms()
    async with hub.transaction() as conn:
        job = (
            await conn.execute(
                sa.select(
                    provider_jobs.c.task_id, provider_jobs.c.attempt_id, provider_jobs.c.tenant_id
                ).where(
                    provider_jobs.c.provider == provider,
                    provider_jobs.c.provider_job_id == result.provider_job_id,
                )
            )
        ).first()
        archived = (
            await conn.execute(
                dialect_of(conn)
                .insert(callback_events)
                .values(
                    provider=provider,
                    webhook_id=webhook_id,
                    provider_job_id=result.provider_job_id,
                    body=body,
                    received_at=now,
                    # Before our submit answer was recorded: polling and reconciliation
                    # catch up.
                    status="unmatched" if job is None else "applied",
                )
                .on_conflict_do_nothing()
                .returning(callback_events.c.id)
            )
        ).scalar_one_or_none()
        if archived is None:
            return "duplicate"
        if job is None:
            return "unmatched"
        observation = events.StatusObserved.of(
            result,
            task_id=job.task_id,
            attempt_id=job.attempt_id,
            provider=provider,
            source="callback",
            callback_id=int(archived),
        )
        observed = Envelope.new(
            events.STATUS_OBSERVED,
            observation.model_dump(),
            key=job.task_id,
            source="generation.callbacks",
            tenant_id=job.tenant_id,
            correlation_id=job.task_id,
        )
        await hub.outbox.add(conn, [observed])
    return "accepted"
