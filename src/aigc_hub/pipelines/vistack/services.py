"""Commands and queries on videos, shared by the HTTP routes and the CLI.

Uploading (the bytes never pass through the API): :func:`start_upload` answers a signed PUT
straight to the blob store (the hub's own ``/blobs/...`` URL on embedded defaults, S3 at
scale), the client PUTs the file, and :func:`create_video` checks what arrived (its size and
its first bytes: a video container, whatever the client declared), then writes the video
``pending`` and its ``transcode`` message in one transaction (the outbox).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final

import pydantic
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.blobs import keys
from aigc_hub.core import errors
from aigc_hub.core.envelope import Envelope
from aigc_hub.core.ids import new_id
from aigc_hub.media import sniff
from aigc_hub.store.engine import reader

from . import events, records
from .models import vistack_videos
from .state import Vistack
from .states import VideoStatus

#: Containers a source video may come in (sniffed from its first bytes).
VIDEO_KINDS: Final = frozenset({"mp4", "mov", "webm", "mkv"})
#: Key kinds under the tenant's prefix: sources, DASH outputs (the seed's ``dash/{videoID}``)
#: and covers.
SOURCE_KIND, DASH_KIND, COVER_KIND = "vistack", "dash", "cover"
UPLOAD_ID = r"^upl_[0-9a-f]{32}$"
VIDEO_ID = r"^vid_[0-9a-f]{32}$"


class VideoNotFound(errors.NotFound):
    """No video of this tenant has this id."""

    def __init__(self, video_id: str) -> None:
        super().__init__(f"video {video_id} not found")


class UploadMissing(errors.Conflict):
    """The upload named has no object yet (the PUT did not happen or did not finish)."""


class UploadTaken(errors.Conflict):
    """A video was already made from this upload."""


class UploadTicket(pydantic.BaseModel):
    """Where and how to PUT the source video."""

    upload_id: str
    method: str = "PUT"
    url: str
    headers: dict[str, str]
    expires_at: int = pydantic.Field(description="epoch seconds")
    max_bytes: int


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


def source_key(tenant_id: str, upload_id: str) -> str:
    """Where an upload's source video is stored."""
    return keys.object_key(tenant_id, SOURCE_KIND, upload_id, "source")


def dash_prefix(tenant_id: str, video_id: str) -> str:
    """The seed's ``dash/{videoID}`` prefix, inside the tenant's keys (ends with ``/``)."""
    return keys.object_key(tenant_id, DASH_KIND, video_id, "x")[:-1]


def cover_key(tenant_id: str, video_id: str) -> str:
    """Where a video's cover is stored."""
    return keys.object_key(tenant_id, COVER_KIND, video_id, "cover.jpg")


async def start_upload(vs: Vistack, *, tenant_id: str, size: int) -> UploadTicket:
    """A signed PUT for a source of exactly ``size`` bytes (InvalidInput past the limit)."""
    limit = vs.settings.max_upload_bytes
    if size < 1 or size > limit:
        raise errors.InvalidInput("size", f"a source video is 1 to {limit} bytes, not {size}")
    upload_id = f"upl_{new_id().hex}"
    signed = await vs.store.presign_put(
        source_key(tenant_id, upload_id), vs.settings.upload_url_ttl_s, size=size
    )
    return UploadTicket(
        upload_id=upload_id,
        url=signed.url,
        headers=dict(signed.headers),
        expires_at=signed.expires_at,
        max_bytes=size,
    )


async def _head_bytes(vs: Vistack, key: str) -> bytes:
    """The object's first bytes, by a ranged read (never the whole object)."""
    chunks = [c async for c in vs.store.stream(key, sniff.SNIFF_BYTES, end=sniff.SNIFF_BYTES)]
    return b"".join(chunks)


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

    UploadMissing when nothing was PUT under ``upload_id``; InvalidInput when what was PUT
    is not a video container or breaks the size limit; UploadTaken when a video already has
    this source.
    """
    key = source_key(tenant_id, upload_id)
    info = await vs.store.head(key)
    if info is None:
        raise UploadMissing(f"upload {upload_id} has no file yet: PUT it to the upload URL first")
    if info.size > vs.settings.max_upload_bytes:
        raise errors.InvalidInput("upload_id", f"the file is larger than the limit ({info.size})")
    kind = sniff.sniff(await _head_bytes(vs, key))
    if kind not in VIDEO_KINDS:
        raise errors.InvalidInput(
            "upload_id", f"the uploaded file is not a video container ({kind or 'unknown'})"
        )
    message = events.TranscodeV2(
        videoId=f"vid_{new_id().hex}",
        tenantId=tenant_id,
        sourceKey=key,
        **({"heights": list(heights)} if heights else {}),
    )
    row = new_video_row(
        message, owner_id=owner_id, title=title, size=info.size, now=vs.hub.clock.now_ms()
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
