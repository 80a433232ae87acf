"""The routes of a video's danmaku and comments, mounted under ``/v1/vistack``.

Danmaku: post (202), the playback-time window, and the live feed (SSE: each visible danmaku
once stored, from the backbone's notification feed). Comments: post (202), list with
cursors, replies; and the operators' queue of held comments.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated, Any

import pydantic
from fastapi import APIRouter, Depends, Query, Request
from fastapi.sse import EventSourceResponse, ServerSentEvent

from aigc_hub.interfaces.http import kit
from aigc_hub.interfaces.http.kit import Problem
from aigc_hub.reliability.notification_feed import FeedItem, Gap, NotificationFeed

from . import comments, danmaku, services
from .records import SUBJECT
from .state import STATE, Vistack

router = APIRouter(prefix="/vistack/videos/{video_id}", tags=["vistack"])
review_router = APIRouter(prefix="/vistack/held-comments", tags=["vistack"])
#: One per API process: which videos exist, remembered briefly (see KnownVideos).
KNOWN = danmaku.KnownVideos()
#: What a live client is told on ``reset``.
RESET_ADVICE = "danmaku may have been missed: re-read the window"


async def _vistack(request: Request) -> Vistack:
    return kit.state_of(request, STATE)


VistackState = Annotated[Vistack, Depends(_vistack)]
VideoId = Annotated[str, pydantic.StringConstraints(pattern=services.VIDEO_ID)]
CommentId = Annotated[str, pydantic.StringConstraints(pattern=comments.COMMENT_ID)]


class Posted(pydantic.BaseModel):
    """What was queued: its id."""

    id: str


def _limited(exc: danmaku.RateLimited) -> Problem:
    return Problem(429, str(exc), slug="rate-limited", retry_after_s=exc.retry_after_s)


@router.post(
    "/danmaku",
    status_code=202,
    response_model=Posted,
    summary="Post a danmaku",
    description="A bullet comment shown at `offsetMs` of playback: queued at once (its id "
    "orders by posting), stored by the danmaku writers after moderation, then shown in the "
    "window and the live feed. Per-user limit: AIGC_HUB_VISTACK_DANMAKU_PER_S (burst "
    "_DANMAKU_BURST).",
    responses={
        404: {"description": "no such video of yours"},
        422: {"description": "a field is invalid"},
        429: {"description": "this user posts too fast (Retry-After)"},
    },
)
async def post_danmaku(
    video_id: VideoId, body: danmaku.DanmakuPost, who: kit.LimitedTenant, vs: VistackState
) -> Posted:
    assert who.tenant_id is not None
    try:
        danmaku_id = await danmaku.post(
            vs, KNOWN, tenant_id=who.tenant_id, user_id=who.key_id, video_id=video_id, body=body
        )
    except danmaku.RateLimited as exc:
        raise _limited(exc) from None
    return Posted(id=danmaku_id)


class DanmakuWindow(pydantic.BaseModel):
    """The visible danmaku of a playback window, by offset then posting."""

    items: list[danmaku.DanmakuView]


@router.get("/danmaku", response_model=DanmakuWindow, summary="Danmaku of a playback window")
async def danmaku_window(
    video_id: VideoId,
    who: kit.LimitedTenant,
    vs: VistackState,
    from_ms: Annotated[int, Query(alias="from", ge=0, description="from this offset, ms")] = 0,
    to_ms: Annotated[
        int, Query(alias="to", ge=0, description="to this offset (excluded), ms")
    ] = danmaku.MAX_OFFSET_MS,
    limit: Annotated[int, Query(ge=1, le=danmaku.MAX_WINDOW)] = 1000,
) -> DanmakuWindow:
    assert who.tenant_id is not None
    if to_ms <= from_ms:
        raise Problem(422, "`to` must be after `from`", slug="bad-window")
    await KNOWN.check(vs, who.tenant_id, video_id)
    items = await danmaku.window(
        vs, tenant_id=who.tenant_id, video_id=video_id, from_ms=from_ms, to_ms=to_ms, limit_n=limit
    )
    return DanmakuWindow(items=items)


@router.get(
    "/danmaku/live",
    response_class=EventSourceResponse,
    summary="The video's danmaku as they are stored (SSE)",
    description="`event: danmaku` per visible danmaku (JSON), in posting order per batch, "
    "after it was stored; `event: reset` when some may have been missed (re-read the "
    "window); `: heartbeat` comments while idle.",
)
async def live(
    video_id: VideoId,
    request: Request,
    who: kit.LimitedTenant,
    vs: VistackState,
    max_seconds: Annotated[float, Query(gt=0, le=86_400)] = 3600,
) -> AsyncIterator[ServerSentEvent]:
    assert who.tenant_id is not None
    await KNOWN.check(vs, who.tenant_id, video_id)
    feed = kit.hub_of(request).notification_feed
    async for event in live_events(feed, who.tenant_id, video_id, max_seconds):
        yield event


async def live_events(
    feed: NotificationFeed, tenant_id: str, video_id: str, max_seconds: float
) -> AsyncIterator[ServerSentEvent]:
    """The video's danmaku as SSE events from the hub's notification feed (also the
    console's): ``danmaku`` per visible one, ``reset`` on a gap, heartbeats while idle."""
    await feed.start()
    sub = feed.subscribe(tenant_id, [video_id])
    loop = asyncio.get_running_loop()
    deadline = loop.time() + min(max_seconds, feed.settings.max_stream_s)
    try:
        yield ServerSentEvent(comment="ready")
        while (left := deadline - loop.time()) > 0:
            item = await sub.next(min(feed.settings.heartbeat_s, left))
            if isinstance(item, FeedItem):
                note = item.notification
                if note.subject_type != SUBJECT or note.kind != "messages":
                    continue
                shown: list[dict[str, Any]] = note.data.get("danmaku", [])
                for one in shown:
                    yield ServerSentEvent(event="danmaku", data=one)
            elif isinstance(item, Gap):
                yield ServerSentEvent(event="reset", data={"detail": RESET_ADVICE})
            elif sub.closed:
                return
            else:
                yield ServerSentEvent(comment="heartbeat")
    finally:
        sub.close()


@router.post(
    "/comments",
    status_code=202,
    response_model=Posted,
    summary="Post a comment or a reply",
    description="Queued at once; moderation then makes it visible, holds it for review or "
    "rejects it. `parentId` replies to a comment of the same video. Per-user limit: "
    "AIGC_HUB_VISTACK_COMMENTS_PER_MIN.",
    responses={
        404: {"description": "no such video of yours"},
        422: {"description": "a field is invalid, or parentId is not a comment of this video"},
        429: {"description": "this user posts too fast (Retry-After)"},
    },
)
async def post_comment(
    video_id: VideoId, body: comments.CommentPost, who: kit.LimitedTenant, vs: VistackState
) -> Posted:
    assert who.tenant_id is not None
    try:
        comment_id = await comments.post(
            vs, KNOWN, tenant_id=who.tenant_id, user_id=who.key_id, video_id=video_id, body=body
        )
    except danmaku.RateLimited as exc:
        raise _limited(exc) from None
    return Posted(id=comment_id)


@router.get("/comments", response_model=comments.CommentPage, summary="A video's comments")
async def list_comments(
    video_id: VideoId,
    who: kit.LimitedTenant,
    vs: VistackState,
    cursor: str | None = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> comments.CommentPage:
    """Visible top-level comments, newest first, each with its reply count."""
    assert who.tenant_id is not None
    await KNOWN.check(vs, who.tenant_id, video_id)
    return await comments.listing(
        vs, tenant_id=who.tenant_id, video_id=video_id, parent_id=None, cursor=cursor, limit_n=limit
    )


@router.get(
    "/comments/{comment_id}/replies",
    response_model=comments.CommentPage,
    summary="A comment's replies",
)
async def list_replies(
    video_id: VideoId,
    comment_id: CommentId,
    who: kit.LimitedTenant,
    vs: VistackState,
    cursor: str | None = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> comments.CommentPage:
    """Visible replies, oldest first."""
    assert who.tenant_id is not None
    await KNOWN.check(vs, who.tenant_id, video_id)
    return await comments.listing(
        vs,
        tenant_id=who.tenant_id,
        video_id=video_id,
        parent_id=comment_id,
        cursor=cursor,
        limit_n=limit,
    )


@review_router.get("", summary="Comments held for review (operators)")
async def held_comments(
    admin: kit.AdminPrincipal,
    vs: VistackState,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> dict[str, list[dict[str, Any]]]:
    return {"items": await comments.held(vs, limit_n=limit)}


class Decision(pydantic.BaseModel):
    """An operator's decision on a held comment."""

    model_config = pydantic.ConfigDict(extra="forbid")

    approve: bool
    note: str = pydantic.Field("", max_length=200)


@review_router.post(
    "/{comment_id}/decision",
    response_model=comments.CommentView,
    summary="Approve or reject a held comment (audited)",
    responses={404: {"description": "no held comment with this id"}},
)
async def decide(
    comment_id: CommentId, body: Decision, admin: kit.AdminPrincipal, vs: VistackState
) -> comments.CommentView:
    return await comments.decide(
        vs, comment_id=comment_id, approve=body.approve, actor=admin.key_id, note=body.note
    )
