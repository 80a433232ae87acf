"""The repository of videos: typed snapshots, look-ups and guarded (and fenced) moves.

Every status move writes the video's history and adds a notification to the outbox in the
same transaction, so ``GET /v1/events`` streams a video's stages exactly when they committed.
A move made under a transcode lease carries the lease's fencing token: the row keeps the
highest token that wrote it, and a write with an older one raises ``FencedOut`` (the worker
whose lease expired while it was paused cannot publish over the one that took over).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.core.envelope import Envelope
from aigc_hub.reliability.notifications import Notification, notification_envelope
from aigc_hub.reliability.outbox import OutboxWriter
from aigc_hub.store.fencing import fenced_update
from aigc_hub.store.transitions import move

from .models import vistack_videos
from .states import VIDEOS, VideoStatus

#: The ``subject_type`` of a video's notifications.
SUBJECT = "vistack_video"


@dataclass(frozen=True)
class Video:
    """A video as read: the row's columns by name, its status typed."""

    row: Mapping[str, Any]

    @property
    def id(self) -> str:
        return str(self.row["id"])

    @property
    def tenant_id(self) -> str:
        return str(self.row["tenant_id"])

    @property
    def status(self) -> VideoStatus:
        return VideoStatus(self.row["status"])

    @property
    def version(self) -> int:
        return int(self.row["status_version"])

    @property
    def retry_epoch(self) -> int:
        return int(self.row["retry_epoch"] or 0)


async def load(conn: AsyncConnection, video_id: str, *, lock: bool = False) -> Video | None:
    """The video ``video_id``, or None (``lock``: FOR UPDATE where the database has it)."""
    query = sa.select(vistack_videos).where(vistack_videos.c.id == video_id)
    if lock:
        query = query.with_for_update()
    row = (await conn.execute(query)).mappings().first()
    return None if row is None else Video(dict(row))


async def move_video(
    conn: AsyncConnection,
    video: Video,
    to: VideoStatus,
    *,
    cause: str,
    at: int,
    outbox: OutboxWriter,
    values: Mapping[str, object] | None = None,
    token: int | None = None,
) -> Video:
    """Move ``video`` (as read) to ``to`` with ``values``, recording why and announcing it.

    With ``token`` (a transcode lease's fencing token) the write is fenced first: FencedOut
    when a newer lease already wrote the row. StaleTransition when the video moved meanwhile.
    """
    if token is not None:
        await fenced_update(conn, vistack_videos, vistack_videos.c.id == video.id, {}, token=token)
    changes = {"updated_at": at, **(values or {})}
    moved = await move(
        conn,
        VIDEOS,
        video.id,
        current=video.status,
        to=to,
        seen_version=video.version,
        values=changes,
        record={"video_id": video.id, "cause": cause, "at": at},
        announce=lambda version: [
            notification({**video.row, **changes, "status": to.value}, version, at)
        ],
    )
    await outbox.add(conn, moved.events)
    row = {**video.row, **changes, "status": to.value, "status_version": moved.version}
    if token is not None:
        row["fencing_token"] = token
    return Video(row)


async def set_progress(
    conn: AsyncConnection,
    video_id: str,
    at: int,
    *,
    stage: str,
    progress: float,
    token: int,
    outbox: OutboxWriter,
) -> bool:
    """Record the running transcode's stage and progress (fenced) and announce it; False
    when the video is no longer processing."""
    t = vistack_videos
    written = await fenced_update(
        conn,
        t,
        sa.and_(t.c.id == video_id, t.c.status == VideoStatus.PROCESSING.value),
        {"stage": stage, "progress": progress, "updated_at": at},
        token=token,
    )
    if not written:
        return False
    row = (await conn.execute(sa.select(t).where(t.c.id == video_id))).mappings().one()
    await outbox.add(conn, [notification(dict(row), None, at, kind="progress")])
    return True


def notification(
    row: Mapping[str, Any],
    version: int | None,
    at: int,
    *,
    kind: Literal["status", "progress"] = "status",
) -> Envelope:
    """The hint that the video ``row`` (as it is now) changed; clients re-read it for facts."""
    progress = row.get("progress")
    note = Notification(
        tenant_id=str(row["tenant_id"]),
        subject_type=SUBJECT,
        subject_id=str(row["id"]),
        kind=kind,
        status=str(row["status"]),
        stage=row.get("stage"),
        progress=None if progress is None else max(0.0, min(1.0, float(progress))),
        status_version=version if version is not None else row.get("status_version"),
        occurred_at_ms=at,
        data={"attempts": row.get("attempts"), "error_code": row.get("error_code")},
    )
    return notification_envelope(note, source="vistack")
