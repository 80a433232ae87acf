"""Generation's editing projects in the console: a list, and a project's page with its
timeline (clips on tracks at their in/out points, texts, audio, the revision number), a
minimal editor (reorder and trim the clips of a track), an export button with its progress
and a player of the result.

The page saves the same timeline document the API takes (``TimelineV1``) through the same
service, so the same rules refuse the same mistakes (409 for a stale base revision, 422
naming the element). Its script calls the console's own JSON routes below, authenticated
by the session and its CSRF token. A tenant session sees only its own projects (another's
answers the same 404 as an unknown id); an admin sees every tenant's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import pydantic
import sqlalchemy as sa
from fastapi import APIRouter, Body, Depends, Path, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse

from aigc_hub.bootstrap import Hub
from aigc_hub.core import errors
from aigc_hub.interfaces.console.auth import CheckedCallDep, ConsoleRoute, ViewerDep
from aigc_hub.interfaces.console.gallery import scope_of
from aigc_hub.interfaces.console.rendering import page
from aigc_hub.interfaces.http.auth import hub_of
from aigc_hub.pipelines.generation import exports, playback, projects, render_graph
from aigc_hub.pipelines.generation.models import projects as projects_table
from aigc_hub.pipelines.generation.state import STATE, Generation
from aigc_hub.store.engine import reader

HubDep = Annotated[Hub, Depends(hub_of)]
ProjectId = Annotated[str, Path(max_length=36)]
router = APIRouter(route_class=ConsoleRoute)


def _generation(hub: Hub) -> Generation | None:
    """The hub's generation state, or None when the pipeline does not run here."""
    return hub.running_state(STATE)


async def _project_row(hub: Hub, project_id: str, scope: str | None) -> Mapping[str, Any] | None:
    t = projects_table
    query = sa.select(t).where(t.c.id == project_id)
    if scope is not None:
        query = query.where(t.c.tenant_id == scope)
    async with reader(hub.engine) as conn:
        row = (await conn.execute(query)).mappings().first()
    return None if row is None else dict(row)


def _problem(status: int, detail: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"status": status, "detail": detail, **extra}, status_code=status)


def _missing(request: Request, who: Any, what: str) -> Response:
    return page(
        request, "error.html", status_code=404, who=who, title="No such project", message=what
    )


async def _found(
    hub: Hub, who: Any, project_id: str
) -> tuple[Generation, Mapping[str, Any]] | None:
    gen = _generation(hub)
    row = await _project_row(hub, project_id, scope_of(who, "")) if gen is not None else None
    return None if gen is None or row is None else (gen, row)


@router.get("/projects", response_class=HTMLResponse)
async def project_list(request: Request, who: ViewerDep, hub: HubDep) -> Response:
    if _generation(hub) is None:
        return _missing(request, who, "The generation pipeline does not run on this hub.")
    scope = scope_of(who, "")
    t = projects_table
    query = sa.select(t).order_by(t.c.id.desc()).limit(100)
    if scope is not None:
        query = query.where(t.c.tenant_id == scope)
    async with reader(hub.engine) as conn:
        rows = [dict(r) for r in (await conn.execute(query)).mappings()]
    return page(request, "projects.html", who=who, projects=rows)


@router.get("/projects/{project_id}", response_class=HTMLResponse)
async def project_page(
    request: Request, project_id: ProjectId, who: ViewerDep, hub: HubDep
) -> Response:
    found = await _found(hub, who, project_id)
    if found is None:
        return _missing(request, who, f"No project {project_id} here.")
    gen, row = found
    tenant_id = str(row["tenant_id"])
    view = await projects.get_project(gen, tenant_id=tenant_id, project_id=project_id)
    listed = await exports.list_exports(gen, tenant_id=tenant_id, project_id=project_id)
    timeline = view.revision.timeline.model_dump(mode="json") if view.revision else None
    return page(
        request,
        "project.html",
        who=who,
        project=view,
        timeline=timeline,
        exports=listed.items[:10],
        profiles=list(render_graph.RENDER_PROFILES),
    )


@router.post("/projects/{project_id}/revisions")
async def save(
    project_id: ProjectId,
    who: CheckedCallDep,
    hub: HubDep,
    body: Annotated[dict[str, Any], Body()],
) -> Response:
    found = await _found(hub, who, project_id)
    if found is None:
        return _problem(404, f"project {project_id} not found")
    gen, row = found
    try:
        parsed = projects.SaveRevision.model_validate(body)
        saved = await projects.save_revision(
            gen, tenant_id=str(row["tenant_id"]), project_id=project_id, body=parsed
        )
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return _problem(422, f"{where}: {first['msg']}")
    except projects.StaleRevision as exc:
        return _problem(409, str(exc), head_revision=exc.head)
    except errors.InvalidInput as exc:
        return _problem(422, str(exc))
    return JSONResponse({"number": saved.number}, status_code=201)


@router.post("/projects/{project_id}/exports")
async def export(
    project_id: ProjectId,
    who: CheckedCallDep,
    hub: HubDep,
    body: Annotated[dict[str, Any], Body()],
) -> Response:
    found = await _found(hub, who, project_id)
    if found is None:
        return _problem(404, f"project {project_id} not found")
    gen, row = found
    key = str(body.pop("idempotency_key", ""))[:200]
    if not key:
        return _problem(400, "idempotency_key is required (one per click)")
    try:
        made, _ = await exports.request_export(
            gen,
            tenant_id=str(row["tenant_id"]),
            project_id=project_id,
            body=exports.RequestExport.model_validate(body),
            idempotency_key=key,
        )
    except pydantic.ValidationError as exc:
        return _problem(422, str(exc.errors()[0]["msg"]))
    except render_graph.InvalidRenderInput as exc:
        return _problem(422, str(exc))
    except projects.ProjectNotFound as exc:
        return _problem(404, str(exc))
    return JSONResponse(made.model_dump(mode="json"), status_code=202)


@router.get("/projects/{project_id}/exports/{export_id}.json")
async def export_state(
    project_id: ProjectId,
    export_id: Annotated[str, Path(max_length=36)],
    who: ViewerDep,
    hub: HubDep,
) -> Response:
    found = await _found(hub, who, project_id)
    if found is None:
        return _problem(404, f"project {project_id} not found")
    gen, row = found
    tenant_id = str(row["tenant_id"])
    try:
        seen = await exports.get_export(
            gen, tenant_id=tenant_id, project_id=project_id, export_id=export_id
        )
    except exports.ExportNotFound as exc:
        return _problem(404, str(exc))
    answer: dict[str, Any] = seen.model_dump(mode="json")
    if seen.status == exports.ExportStatus.SUCCEEDED and seen.asset_id:
        grant = await playback.playback_grant(
            gen,
            tenant_id=tenant_id,
            asset_id=seen.asset_id,
            expires_s=gen.settings.asset_playback_s,
        )
        answer["play_url"], answer["play_type"] = grant.url, grant.content_type
    return JSONResponse(answer)
