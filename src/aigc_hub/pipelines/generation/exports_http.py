"""Export routes, mounted under ``/v1/projects/{project_id}/exports``: request an export of a
revision with a render profile (``Idempotency-Key``: the same click twice is one export),
read one, list a project's, cancel one. Progress reaches the tenant's event stream
(``subject_type`` ``render_job``); the finished file is an asset (``asset_id``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response

from aigc_hub.interfaces.http import kit

from . import exports
from .state import STATE, Generation

router = APIRouter(prefix="/projects/{project_id}/exports", tags=["projects"])


async def _generation(request: Request) -> Generation:
    return kit.state_of(request, STATE)


GenerationState = Annotated[Generation, Depends(_generation)]

_COMMON: dict[int | str, dict[str, Any]] = {
    401: {"description": "missing or unknown API key"},
    404: {"description": "no such project, revision or export (also for another tenant's)"},
    429: {"description": "rate limited (Retry-After)"},
}


@router.post(
    "",
    status_code=202,
    response_model=exports.ExportView,
    summary="Export a revision",
    description="Fixes a revision (the newest by default) and a render profile and queues "
    "its render; the same revision, profile and `Idempotency-Key` answer the same export "
    "(200 with `Idempotent-Replayed: true`). 422 when the timeline cannot be rendered from "
    "its sources (the element named) or the profile is unknown.",
    responses={
        **_COMMON,
        200: {"description": "the export this key already made"},
        400: {"description": "Idempotency-Key missing or invalid"},
        422: {"description": "an unknown profile, or a timeline its sources cannot give"},
    },
)
async def request_export(
    project_id: str,
    body: exports.RequestExport,
    who: kit.LimitedTenant,
    gen: GenerationState,
    response: Response,
    idempotency_key: kit.KeyHeader = None,
) -> exports.ExportView:
    assert who.tenant_id is not None
    key = kit.parse_key(idempotency_key)
    seen, created = await exports.request_export(
        gen, tenant_id=who.tenant_id, project_id=project_id, body=body, idempotency_key=key
    )
    if not created:
        response.status_code = 200
        response.headers["Idempotent-Replayed"] = "true"
    return seen


@router.get(
    "",
    response_model=exports.ExportList,
    summary="A project's exports, newest first",
    responses=_COMMON,
)
async def list_exports(
    project_id: str, who: kit.LimitedTenant, gen: GenerationState
) -> exports.ExportList:
    assert who.tenant_id is not None
    return await exports.list_exports(gen, tenant_id=who.tenant_id, project_id=project_id)


@router.get(
    "/{export_id}",
    response_model=exports.ExportView,
    summary="One export: its state, node counts and, once done, its asset",
    responses=_COMMON,
)
async def get_export(
    project_id: str, export_id: str, who: kit.LimitedTenant, gen: GenerationState
) -> exports.ExportView:
    assert who.tenant_id is not None
    return await exports.get_export(
        gen, tenant_id=who.tenant_id, project_id=project_id, export_id=export_id
    )


@router.post(
    "/{export_id}/cancel",
    response_model=exports.ExportView,
    summary="Cancel an export",
    description="Stops a queued or running export (its running node's FFmpeg is stopped); "
    "an export that already ended is answered as it is.",
    responses=_COMMON,
)
async def cancel_export(
    project_id: str, export_id: str, who: kit.LimitedTenant, gen: GenerationState
) -> exports.ExportView:
    assert who.tenant_id is not None
    return await exports.cancel_export(
        gen, tenant_id=who.tenant_id, project_id=project_id, export_id=export_id
    )
