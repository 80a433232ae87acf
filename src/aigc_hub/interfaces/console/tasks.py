"""The task explorer: search a subject id (a task id…), read its merged timeline and, for a
task some pipeline shows in the gallery, its result asset and variants."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import HTMLResponse

from aigc_hub.bootstrap import Hub
from aigc_hub.interfaces.console.auth import ConsoleRoute, OperatorDep
from aigc_hub.interfaces.console.gallery_items import task_media
from aigc_hub.interfaces.console.rendering import PREFIX, page
from aigc_hub.interfaces.console.timeline import subject_timeline
from aigc_hub.interfaces.http.auth import hub_of

HubDep = Annotated[Hub, Depends(hub_of)]
router = APIRouter(route_class=ConsoleRoute)


@router.get("/tasks", response_class=HTMLResponse)
async def tasks(
    request: Request,
    who: OperatorDep,
    hub: HubDep,
    id: Annotated[str, Query(max_length=200)] = "",
) -> Response:
    subject_id = id.strip()
    timeline = await subject_timeline(hub, subject_id, base=PREFIX) if subject_id else None
    # An admin page: every tenant's task (tenant_id None).
    media = await task_media(hub, subject_id, None) if subject_id else None
    return page(
        request, "tasks.html", who=who, subject_id=subject_id, timeline=timeline, media=media
    )
