"""``chunking-workers`` (seed 003 §4.1): ``documents-uploaded`` → parse → chunk →
``chunks-created``, one event per chunk, keyed by the document.

The file is read and parsed and the text split outside any transaction (in threads: the
parsers and the tokenizer are CPU work); then one commit writes the chunks, the task's move
``queued → processing`` (progress 30, "chunked, embedding…": the seed's 10 → 30) and the
chunk events. A redelivery finds the task moved on and does nothing. Chunk ids are the
document id and the chunk's index, so even a replay that re-chunks writes the same ids.

A document that cannot be parsed (corrupt, encrypted, too many pages, no text) raises its
``PermanentError``: the runtime dead-letters the record at once (the seed's FAQ Q6: bad
data is never worth a retry), and :func:`on_dead_letter` fails the task with the reason in
the same transaction.
"""

from __future__ import annotations

import asyncio
import contextlib

from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import StaleTransition
from aigc_hub.reliability.outbox import Routed
from aigc_hub.runtime.context import HandlerContext

from .. import events, records
from ..models import documents_chunks
from ..parsing import parse
from ..state import Documents
from ..states import TaskStatus

#: Progress once the chunks are out (the seed's "分块完成，向量化中...").
CHUNKED_PROGRESS = 30


async def on_uploaded(docs: Documents, env: Envelope, ctx: HandlerContext) -> list[Envelope]:
    """Chunk one uploaded document (see the module docstring)."""
    uploaded = ctx.payload_as(events.DocumentUploaded)
    async with ctx.read() as conn:
        task = await records.load(conn, uploaded.taskId)
    if task is None or task.status not in (TaskStatus.QUEUED, TaskStatus.FAILED):
        return []  # done already, or deleted
    data = await docs.store.get(uploaded.storageKey)
    parsed = await asyncio.to_thread(parse, data, uploaded.fileName, uploaded.mimeType, docs.limits)
    chunks = await asyncio.to_thread(docs.splitter.split, parsed.text)
    now = ctx.clock.now_ms()
    total = len(chunks)
    document_id = uploaded.documentId
    rows = [
        {
            "id": f"{document_id}-{i}",
            "document_id": document_id,
            "tenant_id": task.tenant_id,
            "kb_id": uploaded.knowledgeBaseId,
            "ordinal": i,
            "start_offset": chunk.start,
            "end_offset": chunk.end,
            "tokens": chunk.tokens,
            "content": chunk.text,
            "created_at": now,
        }
        for i, chunk in enumerate(chunks)
    ]
    out = [
        Envelope.new(
            events.CHUNK_CREATED,
            events.ChunkCreated(
                parentDocumentId=document_id,
                chunkId=row["id"],
                content=row["content"],
                chunkIndex=i,
                totalChunks=total,
                knowledgeBaseId=uploaded.knowledgeBaseId,
                eventTimestamp=now,
                traceId=uploaded.traceId,
                taskId=uploaded.taskId,
                startOffset=row["start_offset"],
                endOffset=row["end_offset"],
                tokens=row["tokens"],
                priority=uploaded.priority,
            ).model_dump(),
            key=document_id,
            source=events.CHUNKING_SVC,
            tenant_id=task.tenant_id,
            correlation_id=uploaded.taskId,
            causation_id=env.event_id,
        )
        for i, row in enumerate(rows)
    ]
    # Nothing to embed (a document of blank pages was refused by the parser; this is text
    # that splits into no chunk at all): it is complete as it is.
    done = total == 0
    values: dict[str, object] = {
        "format": parsed.format,
        "pages": parsed.pages,
        "chars": len(parsed.text),
        "chunks_total": total,
        "embedding_model": docs.embedder.name,
        "progress": 100 if done else CHUNKED_PROGRESS,
        "stage": "completed: no text to index" if done else f"chunked into {total}, embedding",
        "error_reason": None,
        "error_message": None,
    }
    if done:
        values["completed_at"] = now

    async def write(conn: AsyncConnection) -> list[Envelope | Routed]:
        if rows:
            chunks_of = documents_chunks.c.document_id == document_id
            await conn.execute(documents_chunks.delete().where(chunks_of))
            await conn.execute(documents_chunks.insert(), rows)
        cause = "retried" if task.status is TaskStatus.FAILED else "chunked"
        outbox = docs.hub.outbox
        moved = await records.move_task(
            conn, task, TaskStatus.PROCESSING, cause=cause, at=now, outbox=outbox, values=values
        )
        if done:
            await records.move_task(
                conn, moved, TaskStatus.COMPLETED, cause="chunked", at=now, outbox=outbox
            )
        return list(out)

    ctx.write(write)
    return []


async def on_dead_letter(
    docs: Documents, conn: AsyncConnection, env: Envelope, error: BaseException
) -> None:
    """The task of a dead-lettered upload ends ``failed`` with the reason (same transaction
    as the dead letter)."""
    task_id = env.payload.get("taskId")
    if not isinstance(task_id, str):
        return
    task = await records.load(conn, task_id)
    if task is None or task.status not in (TaskStatus.QUEUED, TaskStatus.PROCESSING):
        return
    reason = getattr(error, "reason", None) or type(error).__name__
    with contextlib.suppress(StaleTransition):  # it moved meanwhile: its newer state stands
        await records.move_task(
            conn,
            task,
            TaskStatus.FAILED,
            cause="dead-lettered",
            at=docs.hub.clock.now_ms(),
            outbox=docs.hub.outbox,
            values={
                "stage": "failed",
                "error_reason": str(reason)[:40],
                "error_message": str(error)[:500],
            },
        )
