"""Project routes, mounted under ``/v1``: create a project, save a revision of its timeline
(optimistic concurrency on the revision number), read a project or one revision, list.

The timeline's JSON schema is the request bodies' (``TimelineV1`` in the OpenAPI document).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request

from aigc_hub.interfaces.http import kit
from aigc_hub.interfaces.http.kit import Problem

from . import projects
from .state import STATE, Generation

router = APIRouter(prefix="/projects", tags=["projects"])


async def _generation(request: Request) -> Generation:
    return kit.state_of(request, STATE)


GenerationState = Annotated[Generation, Depends(_generation)]

_COMMON: dict[int | str, dict[str, Any]] = {
    401: {"description": "missing or unknown API key"},
    404: {"description": "no such project (also for another tenant's ids)"},
    422: {
        "description": "an invalid timeline (the element named), or one referencing an asset "
        "that is not your READY asset"
    },
    429: {"description": "rate limited (Retry-After)"},
}


@router.post(
    "",
    status_code=201,
    response_model=projects.ProjectView,
    summary="Create a project",
    description="A new project; with `timeline`, saved as its revision 1.",
    responses=_COMMON,
)
async def create_project(
    body: projects.CreateProject, who: kit.LimitedTenant, gen: GenerationState
) -> projects.ProjectView:
    assert who.tenant_id is not None
    return await projects.create_project(gen, tenant_id=who.tenant_id, body=body)


@router.post(
    "/{project_id}/revisions",
    status_code=201,
    response_model=projects.RevisionView,
    summary="Save a revision of the timeline",
    description="Saves `timeline` as the revision after `base_revision` (the one the edit "
    "started from). Revisions are immutable; saving never touches an export. 409 when the "
    "project has moved past `base_revision`: read it, merge, save again.",
    responses={**_COMMON, 409: {"description": "a stale base_revision (`head_revision` named)"}},
)
async def save_revision(
    project_id: str, body: projects.SaveRevision, who: kit.LimitedTenant, gen: GenerationState
) -> projects.RevisionView:
    assert who.tenant_id is not None
    try:
        return await projects.save_revision(
            gen, tenant_id=who.tenant_id, project_id=project_id, body=body
        )
    except projects.StaleRevision as exc:
        raise Problem(409, str(exc), slug="stale-revision", head_revision=exc.head) from None


@router.get(
    "",
    response_model=projects.ProjectList,
    summary="Your projects, newest first",
    responses={401: _COMMON[401], 429: _COMMON[429]},
)
async def list_projects(
    who: kit.LimitedTenant,
    gen: GenerationState,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    before: Annotated[str | None, Query(max_length=36)] = None,
) -> projects.ProjectList:
    assert who.tenant_id is not None
    return await projects.list_projects(gen, tenant_id=who.tenant_id, limit=limit, before=before)


@router.get(
    "/{project_id}",
    response_model=projects.ProjectView,
    summary="A project and its newest revision",
    responses=_COMMON,
)
async def get_project(
    project_id: str, who: kit.LimitedTenant, gen: GenerationState
) -> projects.ProjectView:
    assert who.tenant_id is not None
    return await projects.get_project(gen, tenant_id=who.tenant_id, project_id=project_id)


@router.get(
    "/{project_id}/revisions/{number}",
    response_model=projects.RevisionView,
    summary="One revision of a project",
    responses=_COMMON,
)
async def get_revision(
    project_id: str,
    number: Annotated[int, Path(ge=1, le=projects.MAX_REVISIONS)],
    who: kit.LimitedTenant,
    gen: GenerationState,
) -> projects.RevisionView:
    assert who.tenant_id is not None
    return await projects.get_revision(
        gen, tenant_id=who.tenant_id, project_id=project_id, number=number
    )
