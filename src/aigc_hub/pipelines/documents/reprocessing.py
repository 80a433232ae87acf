"""Re-embedding a knowledge base's history (seed 003 FAQ Q1, §1.1): a new model version, or
vectors to rebuild, without re-uploading anything.

The seed resets a consumer group's offsets to replay the log; the log's retention (3 days
for ``chunks-created``) would bound how far back that reaches, so the hub replays from its
own record instead: the chunks of the tenant's completed documents of a knowledge base
(uploaded since a time, if given) are written to the outbox again as ``chunks-created``
marked with the run, in one transaction. The embedding group of the model named (both
groups of an A/B test when none is) embeds them; storage upserts each vector by
``(model version, chunk id)``, so a vector is replaced, never doubled, and the tasks stay
``completed`` with their progress. Each event's id is derived from the run and the chunk:
the run's id comes from the caller's Idempotency-Key, so a request sent again re-emits
events the consumers' inboxes already know.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import InvalidInput

from . import events
from .models import documents_chunks, documents_tasks
from .services import check_kb
from .state import Documents
from .states import TaskStatus

#: Run and event ids are derived under this namespace.
NAMESPACE = uuid.UUID("0b6f4d2e-93a1-5c77-8e0f-4a2d6c1b9e58")
#: Chunks written to the outbox per statement.
PAGE = 500


class ReprocessRun(BaseModel):
    """A run as queued: what it re-embeds."""

    run_id: str
    knowledge_base_id: str
    since: int | None
    model: str | None
    documents: int
    chunks: int


def run_id_of(tenant_id: str, idempotency_key: str) -> str:
    """The run a tenant's request with ``idempotency_key`` starts (the same for a resend)."""
    return "run_" + uuid.uuid5(NAMESPACE, f"{tenant_id}\x00{idempotency_key}").hex


async def reprocess(
    docs: Documents,
    *,
    tenant_id: str,
    kb_id: str,
    run_id: str,
    since_ms: int | None = None,
    model: str | None = None,
    before_commit: Callable[[AsyncConnection, ReprocessRun], Awaitable[None]] | None = None,
) -> ReprocessRun:
    """Queue the re-embedding of the tenant's completed documents of ``kb_id`` uploaded at
    or after ``since_ms`` (all when None) by model version ``model`` (None: every model this
    hub embeds with). InvalidInput for a bad knowledge base, time or model."""
    check_kb(kb_id)
    if since_ms is not None and since_ms < 0:
        raise InvalidInput("since", "a time after 1970")
    if model is not None and docs.embedder_named(model) is None:
        known = ", ".join(m for m in _models(docs))
        raise InvalidInput("model", f"this hub embeds with {known}; {model!r} is not one of them")
    t, c = documents_tasks, documents_chunks
    wanted = [
        t.c.tenant_id == tenant_id,
        t.c.kb_id == kb_id,
        t.c.status == TaskStatus.COMPLETED.value,
    ]
    if since_ms is not None:
        wanted.append(t.c.created_at >= since_ms)
    hub = docs.hub
    now = hub.clock.now_ms()
    async with hub.transaction() as conn:
        tasks = {
            row.document_id: row
            for row in await conn.execute(
                sa.select(t.c.id, t.c.document_id, t.c.priority).where(*wanted)
            )
        }
        chunks = 0
        query = (
            sa.select(c, sa.func.count().over(partition_by=c.c.document_id).label("total"))
            .where(c.c.document_id.in_(sa.select(t.c.document_id).where(*wanted)))
            .order_by(c.c.document_id, c.c.ordinal)
        )
        rows = (await conn.execute(query)).mappings().all()
        for start in range(0, len(rows), PAGE):
            page = rows[start : start + PAGE]
            await hub.outbox.add(
                conn,
                [
                    _event(row, tasks[row["document_id"]], run_id, model, tenant_id, now)
                    for row in page
                ],
            )
            chunks += len(page)
        run = ReprocessRun(
            run_id=run_id,
            knowledge_base_id=kb_id,
            since=since_ms,
            model=model,
            documents=len(tasks),
            chunks=chunks,
        )
        if before_commit is not None:
            await before_commit(conn, run)
    return run


def _models(docs: Documents) -> list[str]:
    return [e.name for e in (docs.embedder, docs.ab_embedder) if e is not None]


def _event(
    row: sa.RowMapping,
    task: sa.Row[Any, Any, Any],
    run_id: str,
    model: str | None,
    tenant_id: str,
    now: int,
) -> Envelope:
    """The ``chunks-created`` of stored chunk ``row`` for run ``run_id``."""
    chunk = events.ChunkCreated(
        parentDocumentId=row["document_id"],
        chunkId=row["id"],
        content=row["content"],
        chunkIndex=row["ordinal"],
        totalChunks=int(row["total"]),
        knowledgeBaseId=row["kb_id"],
        eventTimestamp=now,
        taskId=task.id,
        startOffset=row["start_offset"],
        endOffset=row["end_offset"],
        tokens=row["tokens"],
        priority=task.priority,
        reprocessRun=run_id,
        targetModel=model,
    )
    env = Envelope.new(
        events.CHUNK_CREATED,
        chunk.model_dump(),
        key=row["document_id"],
        source=events.API_SVC,
        tenant_id=tenant_id,
        correlation_id=run_id,
    )
    # The same run and chunk: the same event, whoever sends it and however often.
    event_id = uuid.uuid5(NAMESPACE, f"{run_id}\x00{row['id']}")
    return env.model_copy(update={"event_id": str(event_id)})
