"""``vector-storage-workers`` (seed 003 §4.3): ``embeddings-generated`` → the vector store,
in batches → the task's progress; the last chunk of a document completes it (or asks for
its analysis).

The vector store is a database of its own, so its write cannot share the inbox's
transaction: it is an upsert by ``(model version, chunk id)``, done first, so a redelivered
event rewrites the same row and never adds a second vector. Then each document's stored
count is read back from the store and its task's progress set from it (not incremented: a
count cannot be applied twice), in the commit of each of the document's records.
The batch that brings a document's count to its total moves the task on. A task deleted
meanwhile gets nothing written, and vectors written while it was being deleted are deleted.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import numpy as np
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import StaleTransition
from aigc_hub.pipeline import BatchResults
from aigc_hub.reliability.outbox import Routed
from aigc_hub.runtime.context import HandlerContext, Write

from .. import events, records
from ..models import documents_tasks
from ..state import Documents
from ..states import TaskStatus
from ..vectors.base import VectorItem, VectorStore
from .chunking import CHUNKED_PROGRESS

#: Where progress stands once every chunk is stored and an analysis is still to come.
STORED_PROGRESS = 90
#: Tasks whose vectors are stored.
_STORABLE = (TaskStatus.PROCESSING.value, TaskStatus.COMPLETED.value)


async def on_embeddings(
    docs: Documents, items: Sequence[tuple[Envelope, HandlerContext]]
) -> BatchResults:
    """Store a batch of embeddings (see the module docstring)."""
    embedded = [ctx.payload_as(events.EmbeddingGenerated) for _env, ctx in items]
    tasks = await _tasks(items[0][1], {e.taskId for e in embedded})
    store = await docs.vectors()
    by_namespace: dict[str, list[VectorItem]] = {}
    for e in embedded:
        task = tasks.get(e.taskId)
        # A completed task's vectors come from a reprocessing run or a trailing A/B model.
        if task is None or task["status"] not in _STORABLE:
            continue
        by_namespace.setdefault(e.embeddingModel, []).append(
            VectorItem(
                chunk_id=e.chunkId,
                document_id=e.documentId,
                tenant_id=str(task["tenant_id"]),
                kb_id=e.knowledgeBaseId,
                ordinal=e.chunkIndex,
                start=e.startOffset,
                end=e.endOffset,
                text=e.content,
                vector=np.asarray(e.embedding, dtype=np.float32),
            )
        )
    for namespace, vectors in by_namespace.items():
        await store.upsert(namespace, vectors)
    await _forget_deleted(store, items[0][1], by_namespace)
    # Every record of a document carries the document's progress (computed once, from the
    # store): any one of them may turn out a duplicate at its commit and apply nothing.
    counts: dict[tuple[str, str], int] = {}
    for e, (_env, ctx) in zip(embedded, items, strict=True):
        task = tasks.get(e.taskId)
        if task is None or task["status"] != TaskStatus.PROCESSING.value:
            continue
        if e.embeddingModel != task["embedding_model"] or e.reprocessRun is not None:
            continue  # another model version's vectors (an A/B test), or a rerun: no move
        key = (e.embeddingModel, e.documentId)
        if key not in counts:
            counts[key] = await store.count(e.embeddingModel, document_id=e.documentId)
        ctx.write(_progress(docs, e, counts[key]))
    return [[] for _ in items]


def _progress(docs: Documents, e: events.EmbeddingGenerated, stored: int) -> Write:
    """The commit step setting ``e``'s task to ``stored`` of its chunks."""

    async def write(conn: AsyncConnection) -> list[Envelope | Routed]:
        task = await records.load(conn, e.taskId)
        if task is None or task.status is not TaskStatus.PROCESSING:
            return []
        total = int(task.row["chunks_total"] or e.totalChunks)
        stored_now = max(int(task.row["chunks_stored"]), min(stored, total))
        now = docs.hub.clock.now_ms()
        analyse = bool(task.row["analysis_required"])
        top = STORED_PROGRESS if analyse else 100
        progress = CHUNKED_PROGRESS + (top - CHUNKED_PROGRESS) * stored_now // max(total, 1)
        if stored_now < total:
            await records.update(
                conn,
                task.id,
                now,
                outbox=docs.hub.outbox,
                chunks_stored=stored_now,
                progress=max(progress, int(task.row["progress"])),
                stage=f"stored {stored_now} of {total} chunks",
            )
            return []
        if analyse:
            # Asked once: the batch whose update finds no analysis status yet asks.
            t = documents_tasks
            asked = await conn.execute(
                sa.update(t)
                .where(t.c.id == task.id, t.c.analysis_status.is_(None))
                .values(
                    chunks_stored=total,
                    progress=STORED_PROGRESS,
                    stage="stored, analysing",
                    analysis_status="pending",
                    updated_at=now,
                )
                .returning(t)
            )
            row = asked.mappings().first()
            if row is None:
                return []
            note = records.notification(row, None, now, kind="progress")
            return [note, _analysis_request(e, task.tenant_id, now)]
        # Another batch of the same document may have completed it first.
        with contextlib.suppress(StaleTransition):
            await records.move_task(
                conn,
                task,
                TaskStatus.COMPLETED,
                cause="stored",
                at=now,
                outbox=docs.hub.outbox,
                values={
                    "chunks_stored": total,
                    "progress": 100,
                    "stage": "completed",
                    "completed_at": now,
                },
            )
        return []

    return write


def _analysis_request(e: events.EmbeddingGenerated, tenant_id: str, now: int) -> Envelope:
    return Envelope.new(
        events.ANALYSIS_REQUESTED,
        events.AnalysisRequested(
            taskId=e.taskId,
            documentId=e.documentId,
            knowledgeBaseId=e.knowledgeBaseId,
            embeddingModel=e.embeddingModel,
            eventTimestamp=now,
            traceId=e.traceId,
        ).model_dump(),
        key=e.documentId,
        source=events.STORAGE_SVC,
        tenant_id=tenant_id,
        correlation_id=e.taskId,
    )


async def _forget_deleted(
    store: VectorStore, ctx: HandlerContext, written: dict[str, list[VectorItem]]
) -> None:
    """Delete what was just written for documents deleted while it was being written (the
    deletion removed the vectors it saw, not these)."""
    documents = {(v.tenant_id, v.document_id) for vs in written.values() for v in vs}
    if not documents:
        return
    t = documents_tasks
    async with ctx.read() as conn:
        rows = await conn.execute(
            sa.select(t.c.tenant_id, t.c.document_id).where(
                t.c.document_id.in_(sorted(d for _, d in documents)),
                t.c.status == TaskStatus.DELETED.value,
            )
        )
        deleted = [(str(tenant), str(document)) for tenant, document in rows]
    for tenant_id, document_id in deleted:
        await store.delete_document(tenant_id, document_id)


async def _tasks(ctx: HandlerContext, task_ids: set[str]) -> dict[str, sa.RowMapping]:
    """The rows of ``task_ids`` that exist, by id."""
    t = documents_tasks
    async with ctx.read() as conn:
        rows = await conn.execute(
            sa.select(t.c.id, t.c.tenant_id, t.c.status, t.c.embedding_model).where(
                t.c.id.in_(sorted(task_ids))
            )
        )
        return {str(row["id"]): row for row in rows.mappings()}
