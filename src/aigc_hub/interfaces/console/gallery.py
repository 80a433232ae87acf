"""The tenant-facing gallery: a tenant's tasks with poster, status and a player.

``/gallery`` lists tasks newest first (cursor pages); ``/gallery/{task_id}`` shows one task's
player, its result and every variant. A tenant session always sees only its own tasks (the
``tenant`` parameter is read for admins only, who may pick one tenant or see all). An
unknown task and another tenant's task answer the same 404, so ids cannot be probed.
Players use hls.js, vendored under ``static/vendor`` (no CDN).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.responses import HTMLResponse

from aigc_hub import tenancy
from aigc_hub.bootstrap import Hub
from aigc_hub.interfaces.console.auth import ConsoleRoute, Operator, ViewerDep
from aigc_hub.interfaces.console.gallery_items import (
    PAGE_SIZE,
    format_cursor,
    gallery_page,
    parse_cursor,
    task_media,
)
from aigc_hub.interfaces.console.rendering import page
from aigc_hub.interfaces.http.auth import hub_of
from aigc_hub.pipeline import GalleryQuery

HubDep = Annotated[Hub, Depends(hub_of)]
router = APIRouter(route_class=ConsoleRoute)


def scope_of(who: Operator, requested: str) -> str | None:
    """The tenant whose tasks ``who`` sees: a tenant key's own, whatever it asks for; for an
    admin the requested one, or None (every tenant)."""
    if not who.is_admin:
        return who.principal.tenant_id
    return requested.strip() or None


@router.get("/gallery", response_class=HTMLResponse)
async def gallery(
    request: Request,
    who: ViewerDep,
    hub: HubDep,
    tenant: Annotated[str, Query(max_length=36)] = "",
    before: Annotated[str, Query(max_length=100)] = "",
) -> Response:
    cursor = parse_cursor(before) if before else None
    if before and cursor is None:
        return page(
            request,
            "error.html",
            status_code=400,
            who=who,
            title="Bad page cursor",
            message="The 'before' parameter is not a page cursor of this gallery.",
        )
    scope = scope_of(who, tenant)
    found = await gallery_page(hub, GalleryQuery(scope, before=cursor, limit=PAGE_SIZE))
    tenants = await tenancy.list_tenants(hub.engine) if who.is_admin else []
    return page(
        request,
        "gallery.html",
        who=who,
        gallery=found,
        tenant=scope or "",
        tenants=tenants,
        next_before=format_cursor(found.next_before) if found.next_before else None,
    )


@router.get("/gallery/{task_id}", response_class=HTMLResponse)
async def gallery_item(
    request: Request,
    who: ViewerDep,
    hub: HubDep,
    task_id: Annotated[str, Path(max_length=100)],
) -> Response:
    found = await task_media(hub, task_id, scope_of(who, ""))
    if not found.items:
        status = 503 if found.errors else 404
        return page(
            request,
            "error.html",
            status_code=status,
            who=who,
            title="No such task" if status == 404 else "Gallery unavailable",
            message=f"No task {task_id} in your gallery."
            if status == 404
            else "A gallery source failed; the log says why.",
        )
    return page(request, "gallery_item.html", who=who, item=found.items[0])
