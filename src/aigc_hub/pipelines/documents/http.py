"""The documents pipeline's HTTP routes, mounted under ``/v1`` (seed 003 §3.4, §4.3):
submit a document to a knowledge base, follow its task, search, delete.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import orjson
import pydantic
from fastapi import APIRouter, Depends, File, Form, Query, Request, Response, UploadFile

from aigc_hub.interfaces.http import kit
from aigc_hub.interfaces.http.kit import FoldedIdempotency, IdempotentRoute, Problem

from . import reprocessing, services
from .adapters.embedder import EmbedderMissing
from .parsing import DocumentTooLarge, UnsupportedFormat
from .state import STATE, Documents
from .states import TaskStatus

#: Where submitting, listing and searching live (the upload's body limit is set for it).
KB_PREFIX = "/knowledge-bases"

kb_router = APIRouter(prefix=KB_PREFIX, tags=["documents"], route_class=IdempotentRoute)
tasks_router = APIRouter(prefix="/documents", tags=["documents"])


async def _documents(request: Request) -> Documents:
    """The request's hub's Documents (``async``: no thread round trip per request)."""
    return kit.state_of(request, STATE)


DocumentsState = Annotated[Documents, Depends(_documents)]
TaskId = Annotated[str, pydantic.StringConstraints(pattern=r"^task_[0-9a-f]{32}$")]
DocumentId = Annotated[str, pydantic.StringConstraints(pattern=r"^doc_[0-9a-f]{32}$")]


@kb_router.post(
    "/{kb}/documents",
    status_code=202,
    response_model=services.TaskSnapshot,
    summary="Submit a document",
    description="A multipart upload (`file`; optional `priority`: normal, high or critical; "
    "`analysis`: whether to run the AI analysis, default true). Stores the file and queues "
    "its task (status `queued`, progress 0) with `documents-uploaded` in one transaction, "
    "and answers at once; follow `GET /v1/documents/tasks/{task_id}`. Text, Markdown, "
    "HTML, PDF and DOCX. Requires Idempotency-Key.",
    dependencies=[Depends(kit.admit("documents"))],
    responses={
        413: {"description": "the file is larger than AIGC_HUB_DOCS_MAX_FILE_BYTES"},
        415: {"description": "not a document format the hub reads"},
        422: {"description": "a field is invalid (named in `errors`)"},
        429: {"description": "rate limited, or the pipeline is behind (Retry-After)"},
        503: {"description": "this hub has no embedding model (the `ml` extra is missing)"},
    },
)
async def submit(
    kb: str,
    who: kit.LimitedTenant,
    idem: FoldedIdempotency,
    docs: DocumentsState,
    file: Annotated[UploadFile, File(description="the document")],
    priority: Annotated[Literal["normal", "high", "critical"], Form()] = "normal",
    analysis: Annotated[bool, Form()] = True,
) -> Response:
    assert who.tenant_id is not None
    data = await file.read()
    try:
        task = await services.submit(
            docs,
            tenant_id=who.tenant_id,
            user_id=who.key_id,
            kb_id=kb,
            file_name=file.filename or "",
            declared_mime=file.content_type,
            data=data,
            priority=priority,
            analysis=analysis,
            before_commit=idem.hook(_accepted),
        )
    except DocumentTooLarge as exc:
        raise Problem(413, str(exc), slug="document-too-large") from None
    except UnsupportedFormat as exc:
        raise Problem(415, str(exc), slug="unsupported-format") from None
    except EmbedderMissing as exc:
        raise Problem(503, str(exc), slug="embedding-model-missing") from None
    return idem.stored if idem.stored is not None else _accepted(task)


def _accepted(task: services.TaskSnapshot) -> Response:
    """The 202 answer for a queued task, with where to follow it."""
    return _answer_202(task, {"Location": f"/v1/documents/tasks/{task.task_id}"})


def _answer_202(body: pydantic.BaseModel, headers: dict[str, str] | None = None) -> Response:
    """A 202 with ``body`` as JSON: the answer an Idempotency-Key's resend gets again."""
    return Response(
        content=orjson.dumps(body.model_dump(mode="json")),
        status_code=202,
        media_type="application/json",
        headers=headers,
    )


class TaskPage(pydantic.BaseModel):
    """A page of tasks, newest first; ``next_before`` pages on."""

    items: list[services.TaskSnapshot]
    next_before: int | None


@kb_router.get("/{kb}/documents", response_model=TaskPage, summary="Documents of a knowledge base")
async def list_documents(
    kb: str,
    who: kit.LimitedTenant,
    docs: DocumentsState,
    status: TaskStatus | None = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    before: int | None = None,
) -> TaskPage:
    assert who.tenant_id is not None
    services.check_kb(kb)
    items = await services.list_tasks(
        docs, tenant_id=who.tenant_id, kb_id=kb, status=status, limit=limit, before=before
    )
    more = len(items) == limit
    return TaskPage(items=items, next_before=items[-1].created_at if more else None)


class ReprocessRequest(pydantic.BaseModel):
    """Which documents to re-embed, and by which model version."""

    model_config = pydantic.ConfigDict(extra="forbid")

    since: datetime | None = pydantic.Field(
        None,
        description="only documents uploaded at or after this time (ISO 8601; without a "
        "zone, UTC); all when absent",
    )
    model: str | None = pydantic.Field(
        None,
        description="the model version to re-embed with (a search answer's `model`); every "
        "one this hub embeds with when absent",
    )


@kb_router.post(
    "/{kb}/reprocess",
    status_code=202,
    response_model=reprocessing.ReprocessRun,
    summary="Re-embed a knowledge base",
    description="Re-runs embedding for your completed documents of the knowledge base "
    "(uploaded since `since`, if given): their stored chunks go to the embedding workers "
    "again, marked with the run; each vector is replaced in place (one per model version "
    "and chunk), the tasks stay completed. For a new model version, or an A/B test's second "
    "one catching up on history. Requires Idempotency-Key: a resend is the same run.",
    responses={422: {"description": "a field is invalid (named in `errors`)"}},
)
async def reprocess(
    kb: str,
    body: ReprocessRequest,
    who: kit.LimitedTenant,
    idem: FoldedIdempotency,
    docs: DocumentsState,
) -> Response:
    assert who.tenant_id is not None
    since = body.since
    if since is not None and since.tzinfo is None:
        since = since.replace(tzinfo=UTC)
    run = await reprocessing.reprocess(
        docs,
        tenant_id=who.tenant_id,
        kb_id=kb,
        run_id=reprocessing.run_id_of(who.tenant_id, idem.key),
        since_ms=None if since is None else int(since.timestamp() * 1000),
        model=body.model,
        before_commit=idem.hook(_queued),
    )
    return idem.stored if idem.stored is not None else _queued(run)


def _queued(run: reprocessing.ReprocessRun) -> Response:
    return _answer_202(run)


class SearchAnswer(pydantic.BaseModel):
    """What a search found, best first, and the model version that embedded the query."""

    model: str
    hits: list[services.SearchHit]


@kb_router.get(
    "/{kb}/search",
    response_model=SearchAnswer,
    summary="Search a knowledge base",
    description="Hybrid search: embeds `q`, takes the nearest chunks of your knowledge base "
    "by vector and ranks them by meaning and wording; answers the best `k` with `score` (the "
    "rank: cosine similarity plus twice the share of the query's words the chunk holds), "
    "`similarity` (the cosine alone), document, index and character offsets. `model` names "
    "the embedding model version to search (an A/B test's second one); default the first.",
)
async def search(
    kb: str,
    who: kit.LimitedTenant,
    docs: DocumentsState,
    q: Annotated[str, Query(min_length=1, max_length=2000)],
    k: Annotated[int, Query(ge=1, le=100)] = 10,
    model: str | None = None,
) -> SearchAnswer:
    assert who.tenant_id is not None
    used, hits = await services.search(
        docs, tenant_id=who.tenant_id, kb_id=kb, query=q, k=k, model=model
    )
    return SearchAnswer(model=used, hits=hits)


@tasks_router.get(
    "/tasks/{task_id}",
    response_model=services.TaskSnapshot,
    summary="A document's task",
    description="Status (`queued`, `processing`, `completed`, `failed`, `deleted`), progress "
    "in percent, what is happening (`stage`), chunk counts and the analysis summary.",
    responses={404: {"description": "no such task (also for another tenant's)"}},
)
async def get_task(task_id: TaskId, who: kit.LimitedTenant, docs: DocumentsState) -> Any:
    assert who.tenant_id is not None
    try:
        return await services.get_task(docs, tenant_id=who.tenant_id, task_id=task_id)
    except services.TaskNotFound:
        raise kit.not_found("task") from None


@tasks_router.delete(
    "/{document_id}",
    response_model=services.TaskSnapshot,
    summary="Delete a document",
    description="Its task ends `deleted`; its chunks, vectors and file are removed.",
    responses={404: {"description": "no such document (also for another tenant's)"}},
)
async def delete_document(
    document_id: DocumentId, who: kit.LimitedTenant, docs: DocumentsState
) -> Any:
    assert who.tenant_id is not None
    try:
        return await services.delete_document(
            docs, tenant_id=who.tenant_id, document_id=document_id
        )
    except services.TaskNotFound:
        raise kit.not_found("document") from None
