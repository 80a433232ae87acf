"""Commands and queries on videos, shared by the HTTP routes and the CLI.

A video is made of an uploaded source (``uploads.py``: upload sessions straight to the blob
store, checked when completed): :func:`create_video` writes the video ``pending`` and its
``transcode`` message in one transaction (the outbox).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import pydantic
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.blobs import keys
from aigc_hub.core import errors
from aigc_hub.core.envelope import Envelope
from aigc_hub.core.ids import new_id
from aigc_hub.store.engine import reader

from . import events, records, uploads
from .models import vistack_videos
from .state import Vistack
from .states import VideoStatus

#: Key kinds under the tenant's prefix: DASH outputs (the seed's ``dash/{videoID}``) and
#: covers (sources: ``uploads.SOURCE_KIND``).
DASH_KIND, COVER_KIND = "dash", "cover"
source_key = uploads.source_key
VIDEO_ID = r"^vid_[0-9a-f]{32}$"


class VideoNotFound(errors.NotFound):
    """No video of this tenant has this id."""

    def __init__(self, video_id: str) -> None:
        super().__init__(f"video {video_id} not found")


class UploadMissing(errors.Conflict):
    """The upload named is not complete yet: its parts are still to be sent and joined."""


class UploadTaken(errors.Conflict):
    """A video was already made from this upload."""


class Rendition(pydantic.BaseModel):
    """One video rendition of the DASH manifest."""

    name: str
    width: int
    height: int
    bandwidth_bps: int


class VideoView(pydantic.BaseModel):
    """A video as the API shows it (URLs are added by the route: they are signed per call)."""

    video_id: str
    title: str
    status: VideoStatus
    stage: str | None
    progress: float | None
    attempts: int
    error_code: str | None
    error_message: str | None
    duration_ms: int | None
    renditions: list[Rendition]
    created_at: int
    updated_at: int
    published_at: int | None
    manifest_url: str | None = None
    cover_url: str | None = None


def view(row: Mapping[str, Any]) -> VideoView:
    """The API's view of a video row."""
    return VideoView(
        video_id=row["id"],
        title=row["title"],
        status=VideoStatus(row["status"]),
        stage=row["stage"],
        progress=row["progress"],
        attempts=int(row["attempts"] or 0),
        error_code=row["error_code"],
        error_message=row["error_message"],
        duration_ms=row["duration_ms"],
        renditions=[Rendition(**r) for r in (row["renditions"] or [])],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        published_at=row["published_at"],
    )


def dash_prefix(tenant_id: str, video_id: str) -> str:
    """The seed's ``dash/{videoID}`` prefix, inside the tenant's keys (ends with ``/``)."""
    return keys.object_key(tenant_id, DASH_KIND, video_id, "x")[:-1]


def cover_key(tenant_id: str, video_id: str) -> str:
    """Where a video's cover is stored."""
    return keys.object_key(tenant_id, COVER_KIND, video_id, "cover.jpg")


async def create_video(
    vs: Vistack,
    *,
    tenant_id: str,
    owner_id: str,
    upload_id: str,
    title: str,
    heights: Sequence[int] | None = None,
    before_commit: Callable[[AsyncConnection, VideoView], Awaitable[None]] | None = None,
) -> VideoView:
    """Make a ``pending`` video of the uploaded source and queue its transcode (v2).

    UploadNotFound for another tenant's upload or none; UploadMissing while it is still
    uploading; InvalidInput when it was rejected (the reason); UploadTaken when a video
    already has this source.
    """
    async with reader(vs.hub.engine) as conn:
        upload = await uploads.load(conn, tenant_id, upload_id)
    if upload["status"] == uploads.UploadStatus.UPLOADING:
        raise UploadMissing(
            f"upload {upload_id} is not complete: PUT its parts, then POST "
            f"/v1/vistack/uploads/{upload_id}/complete"
        )
    if upload["status"] == uploads.UploadStatus.REJECTED:
        raise errors.InvalidInput("upload_id", f"the upload was rejected: {upload['reason']}")
    key = upload["source_key"]
    message = events.TranscodeV2(
        videoId=f"vid_{new_id().hex}",
        tenantId=tenant_id,
        sourceKey=key,
        **({"heights": list(heights)} if heights else {}),
    )
    row = new_video_row(
        message,
        owner_id=owner_id,
        title=title,
        size=upload["size_bytes"],
        now=vs.hub.clock.now_ms(),
    )
    video = view(row)
    async with vs.hub.transaction() as conn:
        taken = await conn.execute(
            sa.select(vistack_videos.c.id).where(vistack_videos.c.source_key == key)
        )
        if taken.first() is not None:
            raise UploadTaken(f"upload {upload_id} is already a video")
        await conn.execute(vistack_videos.insert(), row)
        await vs.hub.outbox.add(conn, [transcode_envelope(message)])
        if before_commit is not None:
            await before_commit(conn, video)
    return video


def new_video_row(
    message: events.TranscodeV2, *, owner_id: str, title: str, size: int, now: int
) -> dict[str, Any]:
    """The ``pending`` row of the video ``message`` transcodes."""
    row: dict[str, Any] = {
        "id": message.videoId,
        "tenant_id": message.tenantId,
        "owner_id": owner_id,
        "title": title,
        "source_key": message.sourceKey,
        "source_bytes": size,
        "heights": message.heights,
        "status": VideoStatus.PENDING.value,
        "status_version": 0,
        "attempts": 0,
        "retry_epoch": 0,
        "created_at": now,
        "updated_at": now,
    }
    row |= dict.fromkeys(["stage", "progress", "retry_at", "fencing_token", "error_code"])
    row |= dict.fromkeys(["error_message", "manifest_key", "cover_key", "duration_ms"])
    return row | dict.fromkeys(["renditions", "published_at"])


def transcode_envelope(
    message: events.TranscodeV1 | events.TranscodeV2, *, source: str = events.API_SVC
) -> Envelope:
    """The ``transcode`` message of ``message``'s version, keyed by its video."""
    return Envelope.new(
        events.TRANSCODE,
        message.model_dump(mode="json"),
        key=message.videoId,
        source=source,
        schema_version=message.v,
        tenant_id=message.tenantId,
        correlation_id=message.videoId,
    )


async def get_video(vs: Vistack, *, tenant_id: str, video_id: str) -> Mapping[str, Any]:
    """The tenant's video row (VideoNotFound for another tenant's or none)."""
    async with reader(vs.hub.engine) as conn:
        video = await records.load(conn, video_id)
    if video is None or video.tenant_id != tenant_id:
        raise VideoNotFound(video_id)
    return video.row


async def list_videos(
    vs: Vistack,
    *,
    tenant_id: str,
    status: VideoStatus | None,
    limit: int,
    before: str | None,
) -> list[VideoView]:
    """The tenant's videos, newest first (ids order by creation), before id ``before``."""
    t = vistack_videos
    query = sa.select(t).where(t.c.tenant_id == tenant_id).order_by(t.c.id.desc()).limit(limit)
    if status is not None:
        query = query.where(t.c.status == status.value)
    if before is not None:
        query = query.where(t.c.id < before)
    async with reader(vs.hub.engine) as conn:
        rows = (await conn.execute(query)).mappings().all()
    return [view(dict(r)) for r in rows]


async def request_delete(
    vs: Vistack,
    *,
    tenant_id: str,
    video_id: str,
    requested_by: str,
    before_commit: Callable[[AsyncConnection], Awaitable[None]] | None = None,
) -> None:
    """Queue the video's ``delete_file`` (VideoNotFound when the tenant has no such video)."""
    message = events.DeleteFile(videoId=video_id, tenantId=tenant_id, requestedBy=requested_by)
    env = Envelope.new(
        events.DELETE_FILE,
        message.model_dump(mode="json"),
        key=video_id,
        source=events.API_SVC,
        tenant_id=tenant_id,
        correlation_id=video_id,
    )
    async with vs.hub.transaction() as conn:
        video = await records.load(conn, video_id)
        if video is None or video.tenant_id != tenant_id:
            raise VideoNotFound(video_id)
        await vs.hub.outbox.add(conn, [env])
        if before_commit is not None:
            await before_commit(conn)
