"""Vistack's videos in the console: a list, and a page that plays a video's DASH manifest
(dash.js, vendored under ``static/vendor``: no CDN) with its danmaku overlaid.

The page reads the danmaku of the playback window around the current time from
``/videos/{id}/danmaku.json`` and the live ones from ``/videos/{id}/danmaku/live`` (SSE):
console routes, authenticated by the console's session, over the pipeline's services and
the hub's notification feed. A tenant session sees only its own videos (another's answers
the same 404 as an unknown id); an admin sees every tenant's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Annotated, Any

import sqlalchemy as sa
from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.sse import EventSourceResponse, ServerSentEvent

from aigc_hub.bootstrap import Hub
from aigc_hub.interfaces.console.auth import ConsoleRoute, ViewerDep
from aigc_hub.interfaces.console.gallery import scope_of
from aigc_hub.interfaces.console.rendering import page
from aigc_hub.interfaces.http.auth import hub_of
from aigc_hub.pipelines.vistack import danmaku, playback
from aigc_hub.pipelines.vistack.interactions_http import live_events
from aigc_hub.pipelines.vistack.models import vistack_videos
from aigc_hub.pipelines.vistack.state import STATE, Vistack
from aigc_hub.store.engine import reader

HubDep = Annotated[Hub, Depends(hub_of)]
VideoId = Annotated[str, Path(pattern=r"^vid_[0-9a-f]{32}$")]
router = APIRouter(route_class=ConsoleRoute)
#: The window the page asks for around the current time, ms.
WINDOW_MS = 30_000
#: How long one live stream lasts (EventSource reconnects by itself).
LIVE_MAX_S = 3600.0


def _vistack(hub: Hub) -> Vistack | None:
    """The hub's vistack state, or None when the pipeline does not run here."""
    return hub.running_state(STATE)


async def _video(hub: Hub, video_id: str, scope: str | None) -> Mapping[str, Any] | None:
    t = vistack_videos
    query = sa.select(t).where(t.c.id == video_id)
    if scope is not None:
        query = query.where(t.c.tenant_id == scope)
    async with reader(hub.engine) as conn:
        row = (await conn.execute(query)).mappings().first()
    return None if row is None else dict(row)


def _missing(request: Request, who: Any, what: str) -> Response:
    return page(
        request, "error.html", status_code=404, who=who, title="No such video", message=what
    )


@router.get("/videos", response_class=HTMLResponse)
async def videos(request: Request, who: ViewerDep, hub: HubDep) -> Response:
    if _vistack(hub) is None:
        return _missing(request, who, "The vistack pipeline does not run on this hub.")
    scope = scope_of(who, "")
    t = vistack_videos
    query = sa.select(t).order_by(t.c.id.desc()).limit(100)
    if scope is not None:
        query = query.where(t.c.tenant_id == scope)
    async with reader(hub.engine) as conn:
        rows = [dict(r) for r in (await conn.execute(query)).mappings()]
    return page(request, "videos.html", who=who, videos=rows)


@router.get("/videos/{video_id}", response_class=HTMLResponse)
async def video_page(request: Request, video_id: VideoId, who: ViewerDep, hub: HubDep) -> Response:
    vs = _vistack(hub)
    row = await _video(hub, video_id, scope_of(who, "")) if vs is not None else None
    if vs is None or row is None:
        return _missing(request, who, f"No video {video_id} here.")
    manifest_url, cover_url = await playback.urls(vs, row)
    return page(
        request,
        "video.html",
        who=who,
        video=row,
        manifest_url=manifest_url,
        cover_url=cover_url,
        window_ms=WINDOW_MS,
    )


@router.get("/videos/{video_id}/danmaku.json")
async def danmaku_window(
    video_id: VideoId,
    who: ViewerDep,
    hub: HubDep,
    from_ms: Annotated[int, Query(alias="from", ge=0)] = 0,
    to_ms: Annotated[int, Query(alias="to", ge=1)] = WINDOW_MS,
) -> Response:
    vs = _vistack(hub)
    row = await _video(hub, video_id, scope_of(who, "")) if vs is not None else None
    if vs is None or row is None:
        return JSONResponse({"detail": "no such video"}, status_code=404)
    items = await danmaku.window(
        vs,
        tenant_id=str(row["tenant_id"]),
        video_id=video_id,
        from_ms=from_ms,
        to_ms=max(to_ms, from_ms + 1),
        limit_n=danmaku.MAX_WINDOW,
    )
    return JSONResponse({"items": [d.model_dump() for d in items]})


@router.get("/videos/{video_id}/danmaku/live", response_class=EventSourceResponse)
async def danmaku_live(
    video_id: VideoId, who: ViewerDep, hub: HubDep
) -> AsyncIterator[ServerSentEvent]:
    vs = _vistack(hub)
    row = await _video(hub, video_id, scope_of(who, "")) if vs is not None else None
    if row is None:
        yield ServerSentEvent(event="gone", data={"detail": "no such video"})
        return
    async for event in live_events(
        hub.notification_feed, str(row["tenant_id"]), video_id, LIVE_MAX_S
    ):
        yield event
