"""``embedding-workers`` (seed 003 §4.2): ``chunks-created`` → the embedding model, in
batches → ``embeddings-generated``, one event per chunk.

A batch group: up to ``embed_batch`` chunks (the seed's 50), or what came within
``embed_wait_s`` (2 s), go to the model in one call; each chunk's event commits with its own
inbox mark, so a redelivered chunk is never embedded into a second event. Chunks of a task
that is gone (deleted, or failed meanwhile) are skipped without a model call. A model that
is overloaded or down fails the call (retried, each chunk alone); one that refuses a chunk's
text fails only that chunk, to the dead-letter queue.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from aigc_hub.core.envelope import Envelope
from aigc_hub.pipeline import BatchResults
from aigc_hub.runtime.context import HandlerContext

from .. import events
from ..models import documents_tasks
from ..state import Documents
from ..states import TaskStatus

#: Tasks whose chunks are still wanted.
_LIVE = (TaskStatus.PROCESSING.value,)


async def on_chunks(
    docs: Documents, items: Sequence[tuple[Envelope, HandlerContext]]
) -> BatchResults:
    """Embed a batch of chunks (see the module docstring)."""
    chunks = [ctx.payload_as(events.ChunkCreated) for _env, ctx in items]
    live = await _live_tasks(items[0][1], {c.taskId for c in chunks})
    wanted = [i for i, chunk in enumerate(chunks) if chunk.taskId in live]
    results: list[list[Envelope] | Exception] = [[] for _ in items]
    if not wanted:
        return results
    embedder = docs.embedder
    vectors = await embedder.embed([chunks[i].content for i in wanted])
    now = items[0][1].clock.now_ms()
    for row, i in enumerate(wanted):
        chunk, (env, _ctx) = chunks[i], items[i]
        vector = vectors[row]
        results[i] = [
            Envelope.new(
                events.EMBEDDING_GENERATED,
                events.EmbeddingGenerated(
                    chunkId=chunk.chunkId,
                    documentId=chunk.parentDocumentId,
                    embedding=vector.tolist(),
                    embeddingModel=embedder.name,
                    dimensions=int(vector.shape[0]),
                    knowledgeBaseId=chunk.knowledgeBaseId,
                    eventTimestamp=now,
                    traceId=chunk.traceId,
                    taskId=chunk.taskId,
                    chunkIndex=chunk.chunkIndex,
                    totalChunks=chunk.totalChunks,
                    startOffset=chunk.startOffset,
                    endOffset=chunk.endOffset,
                    content=chunk.content,
                ).model_dump(),
                key=chunk.parentDocumentId,
                source=events.EMBEDDING_SVC,
                tenant_id=env.tenant_id,
                correlation_id=chunk.taskId,
                causation_id=env.event_id,
            )
        ]
    return results


async def _live_tasks(ctx: HandlerContext, task_ids: set[str]) -> set[str]:
    """Which of ``task_ids`` still want their chunks embedded."""
    t = documents_tasks
    async with ctx.read() as conn:
        rows = await conn.execute(
            sa.select(t.c.id).where(t.c.id.in_(sorted(task_ids)), t.c.status.in_(_LIVE))
        )
        return set(rows.scalars())
