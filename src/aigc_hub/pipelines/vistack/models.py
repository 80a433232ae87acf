"""Tables of the vistack pipeline, on the backbone's ``metadata``.

A video row is the seed's "DB state machine": its ``status`` decides whether a transcode
message still has work to do, and its ``fencing_token`` is the highest lease token that
wrote it (a worker whose lease expired cannot publish over a newer one). Danmaku and
comments hang off a video and go with it when it is deleted. Times are epoch milliseconds.
"""

from __future__ import annotations

import sqlalchemy as sa

from aigc_hub.store.tables import BigId, metadata

#: One uploaded video and where its transcode is.
vistack_videos = sa.Table(
    "vistack_videos",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True, comment="vid_<uuid7 hex>"),
    sa.Column("tenant_id", sa.String(36), nullable=False),
    sa.Column("owner_id", sa.String(100), nullable=False, comment="the API key that uploaded"),
    sa.Column("title", sa.String(200), nullable=False),
    sa.Column("source_key", sa.String(1024), nullable=False, unique=True),
    sa.Column("source_bytes", sa.BigInteger, nullable=False),
    sa.Column("heights", sa.JSON, nullable=False, comment="the rendition ladder asked for"),
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("status_version", sa.BigInteger, nullable=False, default=0),
    sa.Column("stage", sa.String(40), nullable=True, comment="the transcoder's last stage"),
    sa.Column("progress", sa.Float, nullable=True, comment="0..1 of the running transcode"),
    sa.Column("attempts", sa.Integer, nullable=False, default=0, comment="transcodes started"),
    sa.Column("retry_epoch", sa.Integer, nullable=False, default=0, comment="DLQ replays"),
    sa.Column("retry_at", sa.BigInteger, nullable=True, comment="next retry, while waiting"),
    sa.Column("fencing_token", sa.BigInteger, nullable=True),
    sa.Column("error_code", sa.String(40), nullable=True),
    sa.Column("error_message", sa.String(500), nullable=True),
    sa.Column("manifest_key", sa.String(1024), nullable=True),
    sa.Column("cover_key", sa.String(1024), nullable=True),
    sa.Column("duration_ms", sa.BigInteger, nullable=True),
    sa.Column("renditions", sa.JSON, nullable=True),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
    sa.Column("published_at", sa.BigInteger, nullable=True),
    sa.Index("ix_vistack_videos_tenant", "tenant_id", "created_at"),
    sa.Index("ix_vistack_videos_status", "status", "updated_at"),
)

#: Upload sessions: a source video on its way, in parts, straight to the object store.
vistack_uploads = sa.Table(
    "vistack_uploads",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True, comment="upl_<uuid7 hex>"),
    sa.Column("tenant_id", sa.String(36), nullable=False),
    sa.Column("source_key", sa.String(1024), nullable=False, unique=True),
    sa.Column("multipart_id", sa.String(1024), nullable=True, comment="while uploading"),
    sa.Column("size_bytes", sa.BigInteger, nullable=False, comment="declared, then checked"),
    sa.Column("sha256", sa.String(64), nullable=True, comment="declared (hex), checked if known"),
    sa.Column("part_size", sa.BigInteger, nullable=False),
    sa.Column("status", sa.String(12), nullable=False, comment="uploading, uploaded, rejected"),
    sa.Column("reason", sa.String(300), nullable=True, comment="why it was rejected"),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
    sa.Index("ix_vistack_uploads_tenant", "tenant_id", "created_at"),
)

#: Every move of a video, one row per move (removed with the video).
vistack_video_events = sa.Table(
    "vistack_video_events",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("video_id", sa.String(40), nullable=False, index=True),
    sa.Column("from_status", sa.String(20), nullable=True),
    sa.Column("to_status", sa.String(20), nullable=False),
    sa.Column("status_version", sa.BigInteger, nullable=True),
    sa.Column("cause", sa.String(60), nullable=False),
    sa.Column("at", sa.BigInteger, nullable=False),
)

#: Bullet comments: shown over the video at ``offset_ms`` of playback.
vistack_danmaku = sa.Table(
    "vistack_danmaku",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True, comment="dm_<uuid7 hex>: posting order"),
    sa.Column("video_id", sa.String(40), nullable=False),
    sa.Column("tenant_id", sa.String(36), nullable=False),
    sa.Column("user_id", sa.String(100), nullable=False),
    sa.Column("offset_ms", sa.BigInteger, nullable=False),
    sa.Column("text", sa.String(200), nullable=False),
    sa.Column("color", sa.String(7), nullable=False, comment="#rrggbb"),
    sa.Column("mode", sa.String(10), nullable=False, comment="scroll, top, bottom"),
    sa.Column("status", sa.String(10), nullable=False, comment="visible, rejected"),
    sa.Column("reason", sa.String(200), nullable=True, comment="why moderation refused it"),
    sa.Column("posted_at", sa.BigInteger, nullable=False),
    sa.Column("stored_at", sa.BigInteger, nullable=False),
    sa.Index("ix_vistack_danmaku_window", "video_id", "offset_ms", "id"),
)

#: Comments and replies, with where moderation put them.
vistack_comments = sa.Table(
    "vistack_comments",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True, comment="cm_<uuid7 hex>: posting order"),
    sa.Column("video_id", sa.String(40), nullable=False),
    sa.Column("tenant_id", sa.String(36), nullable=False),
    sa.Column("user_id", sa.String(100), nullable=False),
    sa.Column("parent_id", sa.String(40), nullable=True, comment="the comment replied to"),
    sa.Column("text", sa.String(2000), nullable=False),
    sa.Column("status", sa.String(10), nullable=False, comment="visible, held, rejected"),
    sa.Column("reason", sa.String(200), nullable=True, comment="why it was held or refused"),
    sa.Column("posted_at", sa.BigInteger, nullable=False),
    sa.Column("decided_at", sa.BigInteger, nullable=False),
    sa.Index("ix_vistack_comments_video", "video_id", "status", "id"),
    sa.Index("ix_vistack_comments_parent", "parent_id", "id"),
)
