"""The vistack pipeline's video routes, mounted under ``/v1``: upload, create, follow,
play, delete. (Danmaku and comments have routers of their own.)
"""

from __future__ import annotations

from typing import Annotated, Any

import orjson
import pydantic
from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import RedirectResponse

from aigc_hub.blobs.base import BlobNotFound
from aigc_hub.blobs.grants import GrantRefused, PrefixGrants
from aigc_hub.blobs.multipart import CompletedPart, UploadPlan
from aigc_hub.interfaces.http import kit
from aigc_hub.interfaces.http.kit import FoldedIdempotency, IdempotentRoute, Problem

from . import playback, services, uploads
from .state import STATE, Vistack
from .states import VideoStatus

PREFIX = "/vistack"
router = APIRouter(prefix=PREFIX, tags=["vistack"], route_class=IdempotentRoute)
play_router = APIRouter(prefix=PREFIX + "/play", tags=["vistack"])


async def _vistack(request: Request) -> Vistack:
    """The request's hub's Vistack (``async``: no thread round trip per request)."""
    return kit.state_of(request, STATE)


VistackState = Annotated[Vistack, Depends(_vistack)]
VideoId = Annotated[str, pydantic.StringConstraints(pattern=services.VIDEO_ID)]


def _absolute(request: Request, url: str | None) -> str | None:
    """``url`` as the client can open it (the local blob engine signs hub-relative paths)."""
    if url is None or "://" in url:
        return url
    return str(request.base_url).rstrip("/") + url


async def _with_urls(request: Request, vs: Vistack, row: Any) -> services.VideoView:
    video = services.view(row)
    manifest, cover = await playback.urls(vs, row)
    video.manifest_url, video.cover_url = _absolute(request, manifest), _absolute(request, cover)
    return video


UploadId = Annotated[str, pydantic.StringConstraints(pattern=uploads.UPLOAD_ID)]


def _signed(request: Request, plan: UploadPlan) -> UploadPlan:
    for part in plan.parts:
        part.url = _absolute(request, part.url) or part.url
    return plan


@router.post(
    "/uploads",
    status_code=201,
    response_model=uploads.UploadStarted,
    summary="Start uploading a source video",
    description="Opens an upload session straight to the object store: PUT each part's bytes "
    "to its URL (parts of `part_size` bytes, the last shorter) and keep each answer's ETag, "
    "then `POST /v1/vistack/uploads/{upload_id}/complete`, then create the video.",
    responses={
        422: {
            "description": "above AIGC_HUB_VISTACK_MAX_UPLOAD_BYTES, or a part size the "
            "store cannot take"
        }
    },
)
async def start_upload(
    body: uploads.StartUpload, request: Request, who: kit.LimitedTenant, vs: VistackState
) -> uploads.UploadStarted:
    assert who.tenant_id is not None
    started = await uploads.start_upload(vs, tenant_id=who.tenant_id, body=body)
    started.upload = _signed(request, started.upload)
    return started


class PartsRequest(pydantic.BaseModel):
    """Parts that need a (fresh) URL, e.g. one that failed after its URL expired."""

    model_config = pydantic.ConfigDict(extra="forbid")

    part_nos: list[int] = pydantic.Field(min_length=1, max_length=1000)


@router.post(
    "/uploads/{upload_id}/parts",
    response_model=UploadPlan,
    summary="Fresh URLs for some parts",
    description="For parts to send (again) once the first URLs expired. `part_size` is 0 in "
    "the answer: keep the session's.",
    responses={404: {"description": "no such upload"}, 409: {"description": "it is closed"}},
)
async def part_urls(
    upload_id: UploadId,
    body: PartsRequest,
    request: Request,
    who: kit.LimitedTenant,
    vs: VistackState,
) -> UploadPlan:
    assert who.tenant_id is not None
    plan = await uploads.part_urls(
        vs, tenant_id=who.tenant_id, upload_id=upload_id, part_nos=body.part_nos
    )
    return _signed(request, plan)


class CompleteUpload(pydantic.BaseModel):
    """Every part, with the ETag each PUT answered."""

    model_config = pydantic.ConfigDict(extra="forbid")

    parts: list[CompletedPart] = pydantic.Field(min_length=1, max_length=10_000)


@router.post(
    "/uploads/{upload_id}/complete",
    response_model=uploads.UploadView,
    summary="Complete an upload",
    description="Joins the parts and checks the size, the sha256 (when declared and the store "
    "knows it) and that the first bytes are a video container: the upload is then `uploaded` "
    "or `rejected` with its `reason`. Repeatable.",
    responses={
        404: {"description": "no such upload"},
        422: {"description": "the store refused the part list: re-send parts, complete again"},
    },
)
async def complete_upload(
    upload_id: UploadId, body: CompleteUpload, who: kit.LimitedTenant, vs: VistackState
) -> uploads.UploadView:
    assert who.tenant_id is not None
    return await uploads.complete_upload(
        vs, tenant_id=who.tenant_id, upload_id=upload_id, parts=body.parts
    )


class CreateVideo(pydantic.BaseModel):
    """A video from an uploaded source."""

    model_config = pydantic.ConfigDict(extra="forbid")

    upload_id: str = pydantic.Field(pattern=uploads.UPLOAD_ID)
    title: str = pydantic.Field(min_length=1, max_length=200)
    heights: list[int] | None = pydantic.Field(
        None,
        min_length=2,
        max_length=6,
        description="rendition heights in pixels (distinct, 64-4320); default 360 and 720",
    )

    @pydantic.field_validator("heights")
    @classmethod
    def _distinct(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and (len(set(value)) != len(value) or min(value) < 64):
            raise ValueError("distinct heights of 64 to 4320 pixels")
        if value is not None and max(value) > 4320:
            raise ValueError("distinct heights of 64 to 4320 pixels")
        return value


@router.post(
    "/videos",
    status_code=202,
    response_model=services.VideoView,
    summary="Create a video from an upload",
    description="Makes the video of a completed upload `pending` and queues its transcode in "
    "one transaction; follow "
    "`GET /v1/vistack/videos/{video_id}` (or `GET /v1/events`) until `published` or "
    "`failed`. Idempotency-Key makes a resend answer the same video.",
    responses={
        404: {"description": "no such upload"},
        409: {"description": "the upload is not complete yet, or already a video"},
        422: {"description": "a field is invalid, or the upload was rejected (not a video)"},
    },
)
async def create_video(
    body: CreateVideo, who: kit.LimitedTenant, idem: FoldedIdempotency, vs: VistackState
) -> Response:
    assert who.tenant_id is not None
    video = await services.create_video(
        vs,
        tenant_id=who.tenant_id,
        owner_id=who.key_id,
        upload_id=body.upload_id,
        title=body.title,
        heights=body.heights,
        before_commit=idem.hook(_accepted),
    )
    return idem.stored if idem.stored is not None else _accepted(video)


def _accepted(video: services.VideoView) -> Response:
    return Response(
        content=orjson.dumps(video.model_dump(mode="json")),
        status_code=202,
        media_type="application/json",
        headers={"Location": f"/v1{PREFIX}/videos/{video.video_id}"},
    )


class VideoPage(pydantic.BaseModel):
    """A page of videos, newest first; ``next_before`` pages on."""

    items: list[services.VideoView]
    next_before: str | None


@router.get("/videos", response_model=VideoPage, summary="Your videos")
async def list_videos(
    who: kit.LimitedTenant,
    vs: VistackState,
    status: VideoStatus | None = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    before: Annotated[str | None, Query(pattern=services.VIDEO_ID)] = None,
) -> VideoPage:
    assert who.tenant_id is not None
    items = await services.list_videos(
        vs, tenant_id=who.tenant_id, status=status, limit=limit, before=before
    )
    more = len(items) == limit
    return VideoPage(items=items, next_before=items[-1].video_id if more else None)


@router.get(
    "/videos/{video_id}",
    response_model=services.VideoView,
    summary="A video",
    description="Its status, transcode progress and attempts; once published, its duration, "
    "renditions, a signed `manifest_url` (DASH) and `cover_url`, valid for "
    "AIGC_HUB_VISTACK_MANIFEST_URL_TTL_S.",
    responses={404: {"description": "no such video of yours"}},
)
async def get_video(
    video_id: VideoId, request: Request, who: kit.LimitedTenant, vs: VistackState
) -> services.VideoView:
    assert who.tenant_id is not None
    row = await services.get_video(vs, tenant_id=who.tenant_id, video_id=video_id)
    return await _with_urls(request, vs, row)


@router.delete(
    "/videos/{video_id}",
    status_code=202,
    summary="Delete a video",
    description="Queues its `delete_file`: the original, its DASH files and cover, then its "
    "rows, danmaku and comments. The video is gone once `GET` answers 404.",
    responses={404: {"description": "no such video of yours"}},
)
async def delete_video(video_id: VideoId, who: kit.LimitedTenant, vs: VistackState) -> Response:
    assert who.tenant_id is not None
    await services.request_delete(
        vs, tenant_id=who.tenant_id, video_id=video_id, requested_by=who.key_id
    )
    return Response(status_code=202)


@play_router.get(
    "/{token}/{path:path}",
    summary="A published video's DASH manifest, and redirects to its segments",
    description="No API key: the token in the path is the grant. The manifest is served; "
    "any other path under it answers 302 to a presigned URL of that file.",
    responses={
        200: {"content": {playback.MPD_TYPE: {}}, "description": "the manifest"},
        302: {"description": "a segment: its presigned URL"},
        403: {"description": "token tampered or expired, or a path outside the grant"},
        404: {"description": "no such file"},
    },
)
async def play(token: str, path: str, vs: VistackState) -> Response:
    grants = playback.grants(vs)
    try:
        key = PrefixGrants.key_under(grants.verify(token, vs.hub.clock.now_ms()), path)
    except GrantRefused as exc:
        raise Problem(403, str(exc), slug="playback-refused") from None
    ttl = vs.settings.manifest_url_ttl_s
    if path.endswith(".mpd"):
        info = await vs.store.head(key)
        if info is None or info.size > playback.MAX_MANIFEST_BYTES:
            raise kit.not_found("manifest")
        try:
            body = await vs.store.get(key)
        except BlobNotFound:
            raise kit.not_found("manifest") from None
        # private: the grant is in the URL; short: the grant expires
        return Response(
            body, media_type=playback.MPD_TYPE, headers={"Cache-Control": "private, max-age=5"}
        )
    return RedirectResponse(await vs.store.presign_get(key, ttl), status_code=302)
