"""The vistack pipeline's topics (seed 002's table) and message payloads.

Four topics, produced by the API through the outbox (the seed's roadmap: the DB transaction
and the message are one) and consumed by the workers: ``transcode``, ``delete_file``,
``danmaku`` and ``comment``. Every message is keyed by its video's id, so one video's
messages share a partition.

Every payload carries ``v``, its contract version (the seed's roadmap: "Kafka JSON messages
gain a v field"); it equals the envelope's ``schema_version``. ``transcode`` has two versions
side by side: v2 adds ``heights`` (the rendition ladder asked for) with a default, so a v1
message still in the topic is read as a v2 with the default ladder (:func:`transcode_v2`).
"""

from __future__ import annotations

from typing import Literal

import pydantic

from aigc_hub.messaging.catalog import DAY_MS, TopicSpec
from aigc_hub.pipeline import PipelineBase

TRANSCODE_TOPIC = "transcode"
DELETE_FILE_TOPIC = "delete_file"
DANMAKU_TOPIC = "danmaku"
COMMENT_TOPIC = "comment"

TRANSCODE = "vistack.transcode"
DELETE_FILE = "vistack.delete_file"
DANMAKU = "vistack.danmaku"
COMMENT = "vistack.comment"

#: The seed's producer, as the envelopes' ``source``.
API_SVC = "api"
#: The retry dispatcher and the watchdog re-publish ``transcode`` as themselves.
DISPATCHER_SVC = "retry-dispatcher"
WATCHDOG_SVC = "watchdog"

_NOTE = "seed 002"
TOPICS = (
    TopicSpec(TRANSCODE_TOPIC, 6, 7 * DAY_MS, pipeline="vistack", note=_NOTE),
    TopicSpec(DELETE_FILE_TOPIC, 6, 7 * DAY_MS, pipeline="vistack", note=_NOTE),
    TopicSpec(DANMAKU_TOPIC, 12, 3 * DAY_MS, pipeline="vistack", note=_NOTE),
    TopicSpec(COMMENT_TOPIC, 6, 7 * DAY_MS, pipeline="vistack", note=_NOTE),
)

#: The ladder a transcode makes when its message does not say (v1 messages).
DEFAULT_HEIGHTS = (360, 720)


class TranscodeV1(pydantic.BaseModel):
    """Transcode an uploaded video (the first contract)."""

    model_config = pydantic.ConfigDict(extra="ignore")

    v: Literal[1] = 1
    videoId: str
    tenantId: str
    sourceKey: str


class TranscodeV2(pydantic.BaseModel):
    """Transcode an uploaded video; v2 names the rendition ladder (heights in pixels)."""

    model_config = pydantic.ConfigDict(extra="ignore")

    v: Literal[2] = 2
    videoId: str
    tenantId: str
    sourceKey: str
    heights: list[int] = pydantic.Field(
        default_factory=lambda: list(DEFAULT_HEIGHTS), min_length=2, max_length=6
    )

    @pydantic.field_validator("heights")
    @classmethod
    def _heights(cls, value: list[int]) -> list[int]:
        if any(h < 64 or h > 4320 for h in value) or len(set(value)) != len(value):
            raise ValueError("heights: distinct rendition heights between 64 and 4320")
        return sorted(value)


def transcode_v2(payload: pydantic.BaseModel) -> TranscodeV2:
    """Either version of a transcode message, read as v2 (v1 gets the default ladder)."""
    if isinstance(payload, TranscodeV2):
        return payload
    if isinstance(payload, TranscodeV1):
        return TranscodeV2(
            videoId=payload.videoId, tenantId=payload.tenantId, sourceKey=payload.sourceKey
        )
    raise TypeError(f"not a transcode payload: {type(payload).__name__}")


class DeleteFile(pydantic.BaseModel):
    """Delete a video: its objects, then its rows and everything attached to it."""

    model_config = pydantic.ConfigDict(extra="ignore")

    v: Literal[1] = 1
    videoId: str
    tenantId: str
    requestedBy: str


class Danmaku(pydantic.BaseModel):
    """One bullet comment, shown over the video at ``offsetMs`` of playback."""

    model_config = pydantic.ConfigDict(extra="ignore")

    v: Literal[1] = 1
    danmakuId: str
    videoId: str
    tenantId: str
    userId: str
    offsetMs: int = pydantic.Field(ge=0)
    text: str
    color: str
    mode: Literal["scroll", "top", "bottom"]
    postedAt: int


class Comment(pydantic.BaseModel):
    """One comment on a video, or a reply to one (``parentId``)."""

    model_config = pydantic.ConfigDict(extra="ignore")

    v: Literal[1] = 1
    commentId: str
    videoId: str
    tenantId: str
    userId: str
    parentId: str | None = None
    text: str
    postedAt: int


def register(pipeline: PipelineBase) -> None:
    """Declare the topics and the payload schemas on ``pipeline``."""
    for spec in TOPICS:
        pipeline.topic(spec)
    pipeline.event(TRANSCODE, 1, topic=TRANSCODE_TOPIC)(TranscodeV1)
    pipeline.event(TRANSCODE, 2, topic=TRANSCODE_TOPIC)(TranscodeV2)
    pipeline.event(DELETE_FILE, 1, topic=DELETE_FILE_TOPIC)(DeleteFile)
    pipeline.event(DANMAKU, 1, topic=DANMAKU_TOPIC)(Danmaku)
    pipeline.event(COMMENT, 1, topic=COMMENT_TOPIC)(Comment)
