"""Seed 003 §6.3's DLQ management API at the seed's path, ``/api/admin/dlq``: a facade over
the backbone's one dead-letter store, for the documents pipeline's dead letters.

The seed copies each failed record into a ``DlqRecord`` table of its own (§6.2). The hub
already keeps every dead letter of every pipeline in one store (``hub.dlq``), so this router
keeps nothing: it shows the documents pipeline's letters in the seed's shapes (Spring Data's
page, ``DlqRecord``'s fields and statuses, the seed's answers) and acts through the same store
methods as the admin API (``/admin/dlq``), with the same actor, so a retry or a dismissal
writes the same audit row whichever API did it. Each record also says whether a retry is worth
it (FAQ Q6, :mod:`aigc_hub.reliability.dlq_triage`).

The pipeline mounts it at the root (``pipeline.root_routers``) so the seed's clients work
unchanged. Admin key only (401 without one, 403 for a tenant's). It imports only the HTTP kit
and the backbone (docs/pipelines.md, "Layers").
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query
from pydantic import BaseModel, Field

from aigc_hub import tenancy
from aigc_hub.bootstrap import Hub
from aigc_hub.interfaces.http import kit
from aigc_hub.reliability import dlq_triage
from aigc_hub.reliability.dlq import (
    DeadLetter,
    DeadLetterFilter,
    DeadLetterNotFound,
    DeadLetterNotReplayable,
    DeadLetterStatus,
)

#: The pipeline whose letters this API shows: ``Pipeline("documents")``'s name.
PIPELINE = "documents"
#: Largest database id (dead-letter ids are 64-bit keys); beyond it the request is invalid.
MAX_ID = 2**63 - 1

router = APIRouter(prefix="/api/admin/dlq", tags=["documents"])

HubDep = Annotated[Hub, Depends(kit.hub_of)]
RecordId = Annotated[int, Path(alias="recordId", ge=1, le=MAX_ID, description="a record's id")]

#: FastAPI's own type for ``responses`` (its values are OpenAPI objects, hence ``Any``).
_AUTH: dict[int | str, dict[str, Any]] = {
    401: {"description": "No, an unknown or a revoked API key"},
    403: {"description": "The key is not an admin key"},
    422: {"description": "Invalid parameters or body"},
}


class RecordStatus(enum.StrEnum):
    """The seed's ``DlqRecord.status`` strings."""

    PENDING_REVIEW = "pending_review"
    RETRIED = "retried"
    DISMISSED = "dismissed"


#: The backbone's status of a dead letter -> the seed's word for it.
SEED_STATUS: Mapping[DeadLetterStatus, RecordStatus] = {
    DeadLetterStatus.PENDING: RecordStatus.PENDING_REVIEW,
    DeadLetterStatus.REPLAYED: RecordStatus.RETRIED,
    DeadLetterStatus.DISMISSED: RecordStatus.DISMISSED,
}


class TriageOut(BaseModel):
    """Whether a retry is worth it: transient failures are, bad data and refusals are not."""

    kind: dlq_triage.TriageKind
    retryWorthy: bool
    why: str


class DlqRecord(BaseModel):
    """The seed's ``DlqRecord`` (camelCase as its Java record), plus where and why it failed."""

    id: int
    topic: str = Field(description="the failed record's topic")
    originalOffset: int | None
    payload: str = Field(description="the record's value as text (UTF-8, bad bytes replaced)")
    exceptionMessage: str
    receivedAt: int = Field(description="when it was dead-lettered, epoch ms")
    status: RecordStatus
    partition: int | None
    key: str | None
    consumer: str = Field(description="the consumer group that gave up on it")
    errorClass: str
    attempts: int
    triage: TriageOut

    @classmethod
    def of(cls, letter: DeadLetter, known: dlq_triage.KnownClasses) -> DlqRecord:
        verdict = dlq_triage.triage(letter, known)
        return cls(
            id=letter.id,
            topic=letter.topic,
            originalOffset=letter.offset,
            payload=letter.value.decode("utf-8", errors="replace"),
            exceptionMessage=letter.error_message,
            receivedAt=letter.created_at,
            status=SEED_STATUS[letter.status],
            partition=letter.partition,
            key=letter.key,
            consumer=letter.consumer,
            errorClass=letter.error_class,
            attempts=letter.attempts,
            triage=TriageOut(kind=verdict.kind, retryWorthy=verdict.retry_worthy, why=verdict.why),
        )


class DlqPage(BaseModel):
    """Spring Data's page, as the seed's ``dlqRepository.findByTopic(topic, page, size)``."""

    content: list[DlqRecord]
    page: int = Field(description="0-based")
    size: int
    totalElements: int
    totalPages: int


class DismissRequest(BaseModel):
    """The seed's ``DismissRequest``; ``reason`` (ours, optional) goes to the audit log."""

    recordIds: list[Annotated[int, Field(ge=1, le=MAX_ID)]] = Field(max_length=1000)
    reason: str = Field("", max_length=500)


class Retried(BaseModel):
    """The seed's answer to a retry, and the topic the record went back to."""

    message: str
    topic: str


class Dismissed(BaseModel):
    """The seed's answer to a dismissal; ``dismissed`` counts the records it changed."""

    message: str
    dismissed: int


@router.get("/messages", response_model=DlqPage, responses=_AUTH, summary="List DLQ messages")
async def list_messages(
    _: kit.AdminPrincipal,
    hub: HubDep,
    page: Annotated[int, Query(ge=0, le=2**31 - 1, description="0-based")] = 0,
    size: Annotated[int, Query(ge=1, le=200)] = 20,
    topic: Annotated[str | None, Query(max_length=255)] = None,
) -> DlqPage:
    """The documents pipeline's dead letters of every status, newest first; ``topic`` (the
    failed record's) narrows them, and one no letter has gives an empty page."""
    flt = DeadLetterFilter(status=None, pipeline=PIPELINE, topic=topic or None)
    total = await hub.dlq.count(flt)
    offset = page * size
    letters = await hub.dlq.list(flt, limit=size, offset=offset) if offset < total else []
    known = dlq_triage.known_classes()  # one walk of the error tree for the whole page
    return DlqPage(
        content=[DlqRecord.of(x, known) for x in letters],
        page=page,
        size=size,
        totalElements=total,
        totalPages=-(-total // size),
    )


@router.post(
    "/messages/{recordId}/retry",
    response_model=Retried,
    responses={
        **_AUTH,
        404: {"description": "No such record (or another pipeline's)"},
        409: {"description": "Not pending (retried or dismissed already), or not an envelope"},
    },
    summary="Retry one DLQ message",
)
async def retry_message(record_id: RecordId, who: kit.AdminPrincipal, hub: HubDep) -> Retried:
    """Put the record back on its topic, with its event id, through the backbone's replay
    (audited as ``dlq.replay``, a refusal too)."""
    letter = await _owned(hub, record_id)
    try:
        await hub.dlq.replay(letter.id, actor=tenancy.admin_actor(who))
    except DeadLetterNotReplayable as exc:
        raise kit.Problem(409, exc.message) from None
    return Retried(message=f"消息已重新投递到: {letter.topic}", topic=letter.topic)


@router.post(
    "/messages/dismiss", response_model=Dismissed, responses=_AUTH, summary="Dismiss DLQ messages"
)
async def dismiss_messages(body: DismissRequest, who: kit.AdminPrincipal, hub: HubDep) -> Dismissed:
    """Mark the pending records dismissed (audited per record as ``dlq.dismiss``); ids that
    are unknown or another pipeline's are left alone and not counted."""
    ids = list(dict.fromkeys(body.recordIds))
    ours = DeadLetterFilter(status=None, pipeline=PIPELINE, ids=ids)
    owned = [x.id for x in await hub.dlq.list(ours, limit=len(ids))] if ids else []
    n = await hub.dlq.dismiss(owned, actor=tenancy.admin_actor(who), reason=body.reason)
    return Dismissed(message=f"已忽略 {n} 条消息", dismissed=n)


async def _owned(hub: Hub, record_id: int) -> DeadLetter:
    """The documents pipeline's dead letter ``record_id``; 404 when it is unknown or
    another pipeline's (the same answer, as for another tenant's id)."""
    try:
        letter = await hub.dlq.get(record_id)
    except DeadLetterNotFound:
        raise kit.not_found("DLQ record") from None
    if letter.pipeline != PIPELINE:
        raise kit.not_found("DLQ record")
    return letter
