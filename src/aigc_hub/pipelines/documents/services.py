"""Commands and queries of the documents pipeline, shared by HTTP, the CLI and scanners.

``submit`` is the seed's ``DocumentSubmitService`` (§3.4): the upload is stored, then the
task row (``queued``, progress 0) and ``documents-uploaded`` commit in one transaction (the
outbox: an event is published if and only if its task exists), and the caller has its
``task_id`` in milliseconds. Everything slow happens in the consumer groups.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Awaitable, Callable
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import InvalidInput, NotFound
from aigc_hub.core.ids import new_id
from aigc_hub.store.engine import reader

from . import events, records, rules
from .adapters.embedder import AbsentEmbedder, EmbedderMissing
from .models import documents_chunks, documents_tasks
from .parsing import DocumentTooLarge, detect_format
from .state import Documents
from .states import TaskStatus
from .vectors.base import Hit

#: A knowledge base is named by its tenant: 1-64 of these.
KB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
#: Characters kept in a stored file's key (the rest become ``_``).
_KEY_SAFE = re.compile(r"[^A-Za-z0-9._-]")


class TaskNotFound(NotFound):
    """No such task (or another tenant's)."""


class TaskSnapshot(BaseModel):
    """A task as the API and the CLI show it (``GET /v1/documents/tasks/{id}``)."""

    task_id: str
    document_id: str
    knowledge_base_id: str
    status: TaskStatus
    progress: int
    stage: str
    file_name: str
    mime_type: str
    size_bytes: int
    priority: events.Priority
    format: str | None
    pages: int | None
    chunks_total: int | None
    chunks_stored: int
    embedding_model: str | None
    error_reason: str | None
    error_message: str | None
    analysis_required: bool
    analysis_status: str | None
    analysis_verdict: str | None
    analysis_score: float | None
    analysis_findings: int | None
    created_at: int
    updated_at: int
    completed_at: int | None


def snapshot(row: Any) -> TaskSnapshot:
    """The snapshot of a ``documents_tasks`` row."""
    return TaskSnapshot(
        task_id=row["id"],
        knowledge_base_id=row["kb_id"],
        **{k: row[k] for k in TaskSnapshot.model_fields if k in row},
    )


def check_kb(kb_id: str) -> str:
    """``kb_id`` if it is a valid knowledge base name, else InvalidInput."""
    if not KB_ID.fullmatch(kb_id):
        raise InvalidInput("kb", "1-64 of A-Z a-z 0-9 . _ -, starting with a letter or digit")
    return kb_id


async def submit(
    docs: Documents,
    *,
    tenant_id: str,
    user_id: str,
    kb_id: str,
    file_name: str,
    declared_mime: str | None,
    data: bytes,
    priority: events.Priority = "normal",
    analysis: bool = True,
    before_commit: Callable[[AsyncConnection, TaskSnapshot], Awaitable[None]] | None = None,
) -> TaskSnapshot:
    """Store ``data`` and queue its task; the task's snapshot (``queued``, progress 0).

    Refuses at once what can never be processed, storing nothing: a hub without its
    embedding model (EmbedderMissing), a bad knowledge-base name
    or file name (InvalidInput), an empty or too large file (DocumentTooLarge), a format
    that is not a document (UnsupportedFormat). Whether the content parses is the chunking
    worker's to find: a corrupt file ends ``failed`` there, with its reason.
    """
    check_kb(kb_id)
    if isinstance(docs.embedder, AbsentEmbedder):
        raise EmbedderMissing(docs.embedder.reason)
    name = file_name.strip().replace("\\", "/").rsplit("/", 1)[-1]
    if not name or len(name) > 255:
        raise InvalidInput("file", "the file needs a name of 1-255 characters")
    if not data:
        raise InvalidInput("file", "the file is empty")
    limit = docs.settings.max_file_bytes
    if len(data) > limit:
        raise DocumentTooLarge("too_large", f"the file is {len(data)} bytes; the limit is {limit}")
    kind = detect_format(data, name, declared_mime)
    hub = docs.hub
    now = hub.clock.now_ms()
    document_id = f"doc_{new_id().hex}"
    task_id = f"task_{new_id().hex}"
    key = f"documents/{tenant_id}/{document_id}/{_KEY_SAFE.sub('_', name)[-120:]}"
    mime = _MIME_OF.get(kind, declared_mime or "application/octet-stream")
    await docs.store.put(key, data, mime)
    row: dict[str, Any] = {
        "id": task_id,
        "document_id": document_id,
        "tenant_id": tenant_id,
        "kb_id": kb_id,
        "user_id": user_id,
        "file_name": name,
        "mime_type": mime,
        "size_bytes": len(data),
        "content_hash": "sha256:" + hashlib.sha256(data).hexdigest(),
        "storage_key": key,
        "priority": priority,
        "analysis_required": analysis,
        "status": TaskStatus.QUEUED.value,
        "status_version": 0,
        "progress": 0,
        "stage": "queued",
        "chunks_stored": 0,
        "created_at": now,
        "updated_at": now,
    }
    row |= dict.fromkeys(
        ["error_reason", "error_message", "format", "pages", "chars", "chunks_total"]
    )
    row |= dict.fromkeys(["embedding_model", "analysis_status", "analysis_verdict"])
    row |= dict.fromkeys(["analysis_score", "analysis_findings", "trace_id", "completed_at"])
    uploaded = events.DocumentUploaded(
        taskId=task_id,
        documentId=document_id,
        knowledgeBaseId=kb_id,
        storageKey=key,
        fileName=name,
        fileSizeBytes=len(data),
        mimeType=mime,
        userId=user_id,
        priority=priority,
        eventTimestamp=now,
        aiAnalysisRequired=analysis,
    )
    envelope = Envelope.new(
        events.DOCUMENT_UPLOADED,
        uploaded.model_dump(),
        key=document_id,
        source=events.API_SVC,
        tenant_id=tenant_id,
        correlation_id=task_id,
    )
    task = snapshot(row)
    async with hub.transaction() as conn:
        await conn.execute(documents_tasks.insert(), row)
        await hub.outbox.add(conn, [envelope])
        if before_commit is not None:
            await before_commit(conn, task)
    return task


_MIME_OF = {
    "pdf": "application/pdf",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "html": "text/html",
    "markdown": "text/markdown",
    "text": "text/plain",
}


async def get_task(docs: Documents, *, tenant_id: str, task_id: str) -> TaskSnapshot:
    """The tenant's task ``task_id`` (TaskNotFound for another tenant's)."""
    async with reader(docs.hub.engine) as conn:
        task = await records.load(conn, task_id)
    if task is None or task.tenant_id != tenant_id:
        raise TaskNotFound(task_id)
    return snapshot(task.row)


async def list_tasks(
    docs: Documents,
    *,
    tenant_id: str,
    kb_id: str | None = None,
    status: TaskStatus | None = None,
    limit: int = 50,
    before: int | None = None,
) -> list[TaskSnapshot]:
    """The tenant's tasks, newest first (``before``: a ``created_at`` to page from)."""
    t = documents_tasks
    query = sa.select(t).where(t.c.tenant_id == tenant_id)
    if kb_id is not None:
        query = query.where(t.c.kb_id == kb_id)
    if status is not None:
        query = query.where(t.c.status == status.value)
    if before is not None:
        query = query.where(t.c.created_at < before)
    query = query.order_by(t.c.created_at.desc(), t.c.id.desc()).limit(limit)
    async with reader(docs.hub.engine) as conn:
        rows = (await conn.execute(query)).mappings().all()
    return [snapshot(row) for row in rows]


async def delete_document(docs: Documents, *, tenant_id: str, document_id: str) -> TaskSnapshot:
    """Delete a document: its task ends ``deleted``, its chunks, vectors and file go.

    The task moves first, so the storage workers stop writing its vectors (they check the
    task, and delete what a batch wrote after the move); then the vectors and the file go.
    Deleting a deleted document again is a no-op that answers the same snapshot.
    """
    hub = docs.hub
    async with reader(hub.engine) as conn:
        task = await records.load_by_document(conn, document_id)
    if task is None or task.tenant_id != tenant_id:
        raise TaskNotFound(document_id)
    if task.status is not TaskStatus.DELETED:
        now = hub.clock.now_ms()
        async with hub.transaction() as conn:
            await records.move_task(
                conn,
                task,
                TaskStatus.DELETED,
                cause="deleted",
                at=now,
                outbox=hub.outbox,
                values={"stage": "deleted"},
            )
            await conn.execute(
                documents_chunks.delete().where(documents_chunks.c.document_id == document_id)
            )
    vectors = await docs.vectors()
    await vectors.delete_document(tenant_id, document_id)
    await docs.store.delete(str(task.row["storage_key"]))
    return await get_task(docs, tenant_id=tenant_id, task_id=task.id)


class SearchHit(BaseModel):
    """One chunk found by a search: ``score`` ranks it (cosine similarity plus half the
    share of the query's words it holds), ``similarity`` is the cosine alone."""

    score: float
    similarity: float
    document_id: str
    chunk_id: str
    chunk_index: int
    start_offset: int
    end_offset: int
    text: str


async def search(
    docs: Documents,
    *,
    tenant_id: str,
    kb_id: str,
    query: str,
    k: int = 10,
    model: str | None = None,
) -> tuple[str, list[SearchHit]]:
    """The ``k`` chunks of the tenant's knowledge base nearest ``query``: ``(model, hits)``.

    Hybrid: the nearest candidates by vector, reranked by meaning and wording
    (:func:`rules.rerank`).

    ``model`` names an embedding model version (a vector namespace); None is the one this
    hub embeds with. Another version can only be searched when this hub embeds with it too
    (an A/B test's second version).
    """
    check_kb(kb_id)
    text = query.strip()
    if not text:
        raise InvalidInput("q", "the query is empty")
    if not 1 <= k <= 100:
        raise InvalidInput("k", "k is 1-100")
    embedder = docs.embedder_named(model)
    if embedder is None:
        known = ", ".join(e.name for e in (docs.embedder, docs.ab_embedder) if e is not None)
        raise InvalidInput("model", f"this hub embeds with {known}; {model!r} is not one of them")
    vector = (await embedder.embed([text]))[0]
    store = await docs.vectors()
    found = await store.search(embedder.name, tenant_id, kb_id, vector, rules.pool_size(k))
    ranked = rules.rerank(text, [h.text for h in found], [h.score for h in found], k)
    return embedder.name, [_hit(found[r.index], r.score) for r in ranked]


def _hit(hit: Hit, score: float) -> SearchHit:
    return SearchHit(
        score=round(score, 6),
        similarity=hit.score,
        document_id=hit.document_id,
        chunk_id=hit.chunk_id,
        chunk_index=hit.ordinal,
        start_offset=hit.start,
        end_offset=hit.end,
        text=hit.text,
    )
