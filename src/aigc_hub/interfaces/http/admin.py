"""The admin API (admin key only): dead letters, bulk replay jobs, lag, outbox, audit, and
revoking API keys.

Mount it with ``app.include_router(admin.router, prefix="/admin")``. Every action is audited
with ``actor = "admin:<key id>"`` (the dead-letter store and the replay jobs write the audit
rows in the same transaction as the change). Bulk replays run as background tasks owned by
the app's :class:`~aigc_hub.reliability.replay_jobs.ReplayJobs` (``app.state.replay_jobs``,
created on first use; set it beforehand to change the rate).
"""

from __future__ import annotations

import base64
import json
from typing import Annotated, Any, Literal

import sqlalchemy as sa
from fastapi import APIRouter, Depends, Path, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from aigc_hub import tenancy
from aigc_hub.bootstrap import Hub
from aigc_hub.interfaces.http.auth import AdminPrincipal, admin_principal, hub_of, not_found
from aigc_hub.interfaces.http.idempotency import AdminIdempotency, IdempotentRoute
from aigc_hub.interfaces.http.key_cache import key_cache_of
from aigc_hub.interfaces.http.problems import MEDIA_TYPE, Problem
from aigc_hub.reliability import audit, dlq_triage
from aigc_hub.reliability.dlq import (
    DeadLetter,
    DeadLetterFilter,
    DeadLetterNotFound,
    DeadLetterNotReplayable,
    DeadLetterStatus,
    status_filter,
)
from aigc_hub.reliability.replay_jobs import Job, ReplayJobs
from aigc_hub.store import tables
from aigc_hub.store.engine import reader
from aigc_hub.tenancy import Principal

# -- problem documentation -----------------------------------------------------------------------


class ProblemDetails(BaseModel):
    """An RFC 9457 problem, as every 4xx/5xx of the API answers (``application/problem+json``)."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    detail: str
    instance: str


def _problem(description: str) -> dict[str, Any]:
    # Inline (no "model"): FastAPI would also list it as application/json, which is untrue.
    return {
        "description": description,
        "content": {MEDIA_TYPE: {"schema": ProblemDetails.model_json_schema()}},
    }


_AUTH: dict[int | str, dict[str, Any]] = {
    401: _problem("No, an unknown or a revoked API key"),
    403: _problem("The key is not an admin key"),
}
_INVALID: dict[int | str, dict[str, Any]] = {422: _problem("Invalid parameters or body")}
_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: _problem("No such resource")}
_CONFLICT: dict[int | str, dict[str, Any]] = {409: _problem("The dead letter cannot be replayed")}
_IDEMPOTENT: dict[int | str, dict[str, Any]] = {
    400: _problem("Idempotency-Key missing or invalid"),
    409: _problem("A request with this Idempotency-Key is still in flight"),
    422: _problem("Invalid body, or the Idempotency-Key was used with another body"),
}

#: Dead-letter ids are 64-bit database keys; anything larger is refused as invalid (422).
DeadLetterId = Annotated[int, Path(ge=1, le=2**63 - 1, description="The dead letter's id")]

router = APIRouter(
    tags=["admin"],
    dependencies=[Depends(admin_principal)],
    responses=_AUTH,
    route_class=IdempotentRoute,  # creating POSTs take an Idempotency-Key
)


def actor_of(who: Principal) -> str:
    """The audit actor of an admin principal (:func:`aigc_hub.tenancy.admin_actor`)."""
    return tenancy.admin_actor(who)


def replay_jobs(request: Request) -> ReplayJobs:
    """The app's replay-job runner (created on first use, kept on ``app.state``)."""
    jobs: ReplayJobs | None = getattr(request.app.state, "replay_jobs", None)
    if jobs is None:
        hub: Hub = hub_of(request)
        jobs = ReplayJobs(hub.engine, hub.dlq, hub.clock)
        request.app.state.replay_jobs = jobs
    return jobs


HubDep = Annotated[Hub, Depends(hub_of)]
JobsDep = Annotated[ReplayJobs, Depends(replay_jobs)]

# -- dead letters --------------------------------------------------------------------------------

#: A status filter: a :class:`DeadLetterStatus` value or "any" (a unit test keeps them equal).
Status = Literal["pending", "replayed", "dismissed", "any"]


class TriageOut(BaseModel):
    """Whether a retry is worth it (seed 003 FAQ Q6; :mod:`aigc_hub.reliability.dlq_triage`)."""

    kind: dlq_triage.TriageKind
    retry_worthy: bool
    why: str

    @classmethod
    def of(cls, verdict: dlq_triage.Triage) -> TriageOut:
        return cls(kind=verdict.kind, retry_worthy=verdict.retry_worthy, why=verdict.why)


class DeadLetterItem(BaseModel):
    """A dead letter without its bytes, with its triage."""

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
    first_failure_at: int = Field(description="epoch ms")
    last_failure_at: int = Field(description="epoch ms")
    status: DeadLetterStatus
    created_at: int = Field(description="epoch ms")
    resolved_at: int | None = Field(description="epoch ms")
    triage: TriageOut

    @classmethod
    def of(cls, letter: DeadLetter, known: dlq_triage.KnownClasses | None = None) -> DeadLetterItem:
        """The item; pass one ``dlq_triage.known_classes()`` when making many."""
        fields = {name: getattr(letter, name) for name in cls.model_fields if name != "triage"}
        return cls(**fields, triage=TriageOut.of(dlq_triage.triage(letter, known)))


class DeadLetterDetail(DeadLetterItem):
    """A dead letter with its envelope (or raw bytes), headers and failure history."""

    envelope: dict[str, Any] | None = Field(description="The parsed envelope, if it is one")
    raw: str | None = Field(description="Base64 of the bytes when they are not an envelope")
    headers: dict[str, str]
    history: list[dict[str, Any]]

    @classmethod
    def of(
        cls, letter: DeadLetter, known: dlq_triage.KnownClasses | None = None
    ) -> DeadLetterDetail:
        base = DeadLetterItem.of(letter, known).model_dump()
        env = letter.envelope()
        parsed: dict[str, Any] | None = None
        if env is not None:
            loaded = json.loads(env.to_bytes())
            parsed = loaded if isinstance(loaded, dict) else None
        return cls(
            **base,
            envelope=parsed,
            raw=None if parsed is not None else base64.b64encode(letter.value).decode(),
            headers={str(k): str(v) for k, v in letter.headers.items()},
            history=[dict(x) for x in letter.history],
        )


class DeadLetterPage(BaseModel):
    """A page of dead letters, newest first; pass ``next_cursor`` as ``cursor`` for the next."""

    items: list[DeadLetterItem]
    next_cursor: str | None


class DeadLetterQuery(BaseModel):
    """The dead-letter filter (query string of the list, body of the bulk replay)."""

    topic: str | None = None
    consumer: str | None = None
    pipeline: str | None = None
    error_class: str | None = None
    since: int | None = Field(None, ge=0, description="created at or after, epoch ms")
    until: int | None = Field(None, ge=0, description="created before, epoch ms")

    def to_filter(self, status: Status | None) -> DeadLetterFilter:
        return DeadLetterFilter(
            status=None if status is None else status_filter(status),
            topic=self.topic,
            consumer=self.consumer,
            pipeline=self.pipeline,
            error_class=self.error_class,
            since_ms=self.since,
            until_ms=self.until,
        )


class BulkReplay(DeadLetterQuery):
    """Replay every pending dead letter matching the filter, at most ``max`` of them."""

    max: int = Field(1000, ge=1, le=100_000)


class JobAccepted(BaseModel):
    """A background job was created; poll ``Location``."""

    job_id: str
    status: str
    total: int


class JobOut(BaseModel):
    """An admin job's progress."""

    id: str
    kind: str
    status: Literal["queued", "running", "done", "failed"]
    total: int
    done: int
    failed: int
    params: dict[str, Any]
    actor: str
    error: str | None
    created_at: int
    updated_at: int
    finished_at: int | None

    @classmethod
    def of(cls, job: Job) -> JobOut:
        return cls.model_validate(job, from_attributes=True)


class Dismiss(BaseModel):
    """Dismiss pending dead letters."""

    ids: list[Annotated[int, Field(ge=1, le=2**63 - 1)]] = Field(min_length=1, max_length=1000)
    reason: str = Field("", max_length=500)


class Dismissed(BaseModel):
    """How many dead letters changed from pending to dismissed."""

    dismissed: int


@router.get("/dlq", response_model=DeadLetterPage, responses=_INVALID, summary="List dead letters")
async def list_dead_letters(
    hub: HubDep,
    topic: str | None = None,
    consumer: str | None = None,
    pipeline: str | None = None,
    error_class: str | None = None,
    status: Status = "pending",
    since: Annotated[int | None, Query(ge=0, description="epoch ms")] = None,
    until: Annotated[int | None, Query(ge=0, description="epoch ms")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[str | None, Query(pattern=r"^[0-9]{1,19}$")] = None,
) -> DeadLetterPage:
    flt = DeadLetterQuery(
        topic=topic,
        consumer=consumer,
        pipeline=pipeline,
        error_class=error_class,
        since=since,
        until=until,
    ).to_filter(status)
    found = await hub.dlq.list(flt, limit=limit + 1, after_id=int(cursor) if cursor else None)
    items = found[:limit]
    more = len(found) > limit
    known = dlq_triage.known_classes()
    return DeadLetterPage(
        items=[DeadLetterItem.of(x, known) for x in items],
        next_cursor=str(items[-1].id) if more else None,
    )


@router.post(
    "/dlq/replay",
    status_code=202,
    response_model=JobAccepted,
    summary="Replay dead letters by filter, in the background",
    responses={
        202: {"headers": {"Location": {"description": "/admin/jobs/{id}"}}},
        **_IDEMPOTENT,
    },
)
async def bulk_replay(
    body: BulkReplay,
    who: AdminPrincipal,
    jobs: JobsDep,
    request: Request,
    response: Response,
    idem: AdminIdempotency,
) -> JobAccepted:
    job = await jobs.start(
        body.to_filter(DeadLetterStatus.PENDING.value), max_items=body.max, actor=actor_of(who)
    )
    response.headers["Location"] = _job_location(request, job.id)
    return JobAccepted(job_id=job.id, status=job.status, total=job.total)


@router.post(
    "/dlq/dismiss", response_model=Dismissed, responses=_INVALID, summary="Dismiss dead letters"
)
async def dismiss(body: Dismiss, who: AdminPrincipal, hub: HubDep) -> Dismissed:
    n = await hub.dlq.dismiss(body.ids, actor=actor_of(who), reason=body.reason)
    return Dismissed(dismissed=n)


@router.get(
    "/dlq/{dead_letter_id}",
    response_model=DeadLetterDetail,
    responses={**_NOT_FOUND, **_INVALID},
    summary="One dead letter with its envelope",
)
async def get_dead_letter(dead_letter_id: DeadLetterId, hub: HubDep) -> DeadLetterDetail:
    try:
        return DeadLetterDetail.of(await hub.dlq.get(dead_letter_id))
    except DeadLetterNotFound:
        raise not_found("dead letter") from None


@router.post(
    "/dlq/{dead_letter_id}/replay",
    response_model=DeadLetterItem,
    responses={**_NOT_FOUND, **_CONFLICT, **_INVALID},
    summary="Replay one dead letter to its original topic",
)
async def replay_one(
    dead_letter_id: DeadLetterId, who: AdminPrincipal, hub: HubDep
) -> DeadLetterItem:
    try:
        await hub.dlq.replay(dead_letter_id, actor=actor_of(who))
    except DeadLetterNotFound:
        raise not_found("dead letter") from None
    except DeadLetterNotReplayable as exc:
        raise Problem(409, exc.message) from None
    return DeadLetterItem.of(await hub.dlq.get(dead_letter_id))


@router.get(
    "/jobs/{job_id}",
    response_model=JobOut,
    responses={**_NOT_FOUND, **_INVALID},
    summary="An admin job",
)
async def get_job(job_id: str, jobs: JobsDep) -> JobOut:
    job = await jobs.get(job_id)
    if job is None:
        raise not_found("job")
    return JobOut.of(job)


def _job_location(request: Request, job_id: str) -> str:
    # The router's mount prefix, whatever it is: the request path up to "/dlq/replay".
    prefix = request.url.path.removesuffix("/dlq/replay")
    return f"{prefix}/jobs/{job_id}"


# -- operations ----------------------------------------------------------------------------------


class PartitionLagOut(BaseModel):
    """A group's position on one partition."""

    partition: int
    committed: int
    end_offset: int
    lag: int


class TopicLagOut(BaseModel):
    """A group's lag on one topic, against its threshold."""

    group: str
    topic: str
    lag: int
    oldest_age_s: float
    breached: bool
    partitions: list[PartitionLagOut]


class LagOut(BaseModel):
    """Lag of every watched consumer group."""

    broker_reachable: bool
    items: list[TopicLagOut]


class OutboxOut(BaseModel):
    """Unpublished outbox rows."""

    backlog: int
    oldest_age_s: float


class AuditEntryOut(BaseModel):
    """One recorded action."""

    id: int
    at: int = Field(description="epoch ms")
    actor: str
    action: str
    target: str
    result: str
    detail: dict[str, Any]


class AuditPage(BaseModel):
    """Audit entries, newest first."""

    items: list[AuditEntryOut]


@router.get(
    "/lag",
    response_model=LagOut,
    responses={503: _problem("The broker cannot be reached")},
    summary="Consumer lag",
)
async def lag(hub: HubDep) -> LagOut:
    try:
        sampled = await hub.lag.sample()
        parts: dict[tuple[str, str], list[PartitionLagOut]] = {}
        for group, topics in hub.lag.groups.items():
            for row in await hub.broker.lag(group, list(topics)):
                parts.setdefault((group, row.topic), []).append(
                    PartitionLagOut(
                        partition=row.partition,
                        committed=row.committed,
                        end_offset=row.end_offset,
                        lag=row.lag,
                    )
                )
    except Exception:
        raise Problem(503, "the broker cannot be reached", retry_after_s=5) from None
    return LagOut(
        broker_reachable=hub.lag.broker_reachable,
        items=[
            TopicLagOut(
                group=x.group,
                topic=x.topic,
                lag=x.lag,
                oldest_age_s=round(x.oldest_age_s, 3),
                breached=x.breached,
                partitions=sorted(parts.get((x.group, x.topic), []), key=lambda p: p.partition),
            )
            for x in sampled
        ],
    )


@router.get("/outbox", response_model=OutboxOut, summary="Outbox backlog")
async def outbox(hub: HubDep) -> OutboxOut:
    o = tables.outbox
    async with reader(hub.engine) as conn:
        count, oldest = (
            await conn.execute(
                sa.select(sa.func.count(), sa.func.min(o.c.created_at)).where(
                    o.c.published_at.is_(None)
                )
            )
        ).one()
    age = 0.0 if oldest is None else max(0.0, (hub.clock.now_ms() - int(oldest)) / 1000)
    return OutboxOut(backlog=int(count), oldest_age_s=round(age, 3))


@router.get(
    "/audit", response_model=AuditPage, responses=_INVALID, summary="The audit log, newest first"
)
async def audit_log(
    hub: HubDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    action: Annotated[str | None, Query(max_length=100)] = None,
) -> AuditPage:
    entries = await audit.recent(hub.engine, limit=limit, action=action)
    return AuditPage(
        items=[
            AuditEntryOut(
                id=e.id,
                at=e.at,
                actor=e.actor,
                action=e.action,
                target=e.target,
                result=e.result,
                detail=dict(e.detail),
            )
            for e in entries
        ]
    )


# -- API keys ------------------------------------------------------------------------------------


class KeyRevoked(BaseModel):
    """Whether this call revoked the key (False: unknown, or revoked already)."""

    revoked: bool


@router.post(
    "/api-keys/{key_id}/revoke",
    response_model=KeyRevoked,
    responses=_INVALID,
    summary="Revoke an API key",
    description="From now on in this process; other API processes remember a live key for up "
    "to AIGC_HUB_API_KEY_CACHE_S seconds (default 5) and may accept it until then. Audited "
    "as api_key.revoke. Repeatable.",
)
async def revoke_key(
    key_id: Annotated[str, Path(max_length=36)], request: Request, who: AdminPrincipal
) -> KeyRevoked:
    revoked = await tenancy.revoke(hub_of(request).engine, key_id, actor=actor_of(who))
    key_cache_of(request).forget(key_id)
    return KeyRevoked(revoked=revoked)
