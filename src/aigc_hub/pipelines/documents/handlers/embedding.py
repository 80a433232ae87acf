"""``embedding-workers`` (seed 003 §4.2): ``chunks-created`` → the embedding model, in
batches → ``embeddings-generated``, one event per chunk.

A batch group: up to ``embed_batch`` chunks (the seed's 50), or what came within
``embed_wait_s`` (2 s), go to the model in one call; each chunk's event commits with its own
inbox mark, so a redelivered chunk is never embedded into a second event. Chunks of a task
that is gone (deleted, or failed meanwhile) are skipped without a model call. A model that
is overloaded or down fails the call (retried, each chunk alone); one that refuses a chunk's
text fails only that chunk, to the dead-letter queue.

An A/B test's second model version (``embedding-workers-b``, :func:`on_chunks_b`) embeds
the same chunks into its own namespace, also for tasks the first version has completed
meanwhile. A chunk a reprocessing run re-sends is embedded for a completed task too, by the
model the run names (by every one when it names none).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from aigc_hub.core.envelope import Envelope
from aigc_hub.pipeline import BatchResults
from aigc_hub.runtime.context import HandlerContext

from .. import events
from ..adapters.embedder import Embedder
from ..models import documents_tasks
from ..state import Documents
from ..states import TaskStatus

_PROCESSING, _COMPLETED = TaskStatus.PROCESSING.value, TaskStatus.COMPLETED.value


async def on_chunks(
    docs: Documents, items: Sequence[tuple[Envelope, HandlerContext]]
) -> BatchResults:
    """Embed a batch of chunks with the model (see the module docstring)."""
    return await _embed(docs.embedder, items, primary=True)


async def on_chunks_b(
    docs: Documents, items: Sequence[tuple[Envelope, HandlerContext]]
) -> BatchResults:
    """Embed a batch of chunks with the A/B test's second model version."""
    assert docs.ab_embedder is not None  # the group runs only when there is one
    return await _embed(docs.ab_embedder, items, primary=False)


def _wanted(chunk: events.ChunkCreated, status: str | None, model: str, primary: bool) -> bool:
    """Whether ``model`` embeds ``chunk``, whose task is in ``status``."""
    if chunk.reprocessRun is not None:
        named = chunk.targetModel in (None, model)
        return named and status in (_PROCESSING, _COMPLETED)
    if primary:
        return status == _PROCESSING
    return status in (_PROCESSING, _COMPLETED)  # a second version may trail the first


async def _embed(
    embedder: Embedder, items: Sequence[tuple[Envelope, HandlerContext]], *, primary: bool
) -> BatchResults:
    chunks = [ctx.payload_as(events.ChunkCreated) for _env, ctx in items]
    statuses = await _statuses(items[0][1], {c.taskId for c in chunks})
    wanted = [
        i
        for i, chunk in enumerate(chunks)
        if _wanted(chunk, statuses.get(chunk.taskId), embedder.name, primary)
    ]
    results: list[list[Envelope] | Exception] = [[] for _ in items]
    if not wanted:
        return results
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
                    reprocessRun=chunk.reprocessRun,
                ).model_dump(),
                key=chunk.parentDocumentId,
                source=events.EMBEDDING_SVC,
                tenant_id=env.tenant_id,
                correlation_id=chunk.taskId,
                causation_id=env.event_id,
            )
        ]
    return results


async def _statuses(ctx: HandlerContext, task_ids: set[str]) -> dict[str, str]:
    """The status of each of ``task_ids`` that exists."""
    t = documents_tasks
    async with ctx.read() as conn:
        rows = await conn.execute(sa.select(t.c.id, t.c.status).where(t.c.id.in_(sorted(task_ids))))
        return {row.id: row.status for row in rows}
