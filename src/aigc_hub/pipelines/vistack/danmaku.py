"""Danmaku (bullet comments): posting, the playback-time window, the live feed's items.

A post is checked (the video is the tenant's, the fields), counted against the poster's
token bucket (``AIGC_HUB_VISTACK_DANMAKU_PER_S`` / ``_BURST``, the cache seam: shared by every
API process with Redis), and written to the outbox as a ``danmaku`` message; the answer
carries its id (``dm_<uuid7>``: ids order by posting). Concurrent posts share one commit
(the hub's grouped service calls): on SQLite a commit per post would cap the rate. The row
is the batch writers' to insert (``handlers/danmaku.py``), after moderation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import pydantic
import sqlalchemy as sa
from cachetools import TTLCache

from aigc_hub.core import errors
from aigc_hub.core.envelope import Envelope
from aigc_hub.core.ids import new_id
from aigc_hub.store.engine import reader

from . import events
from .models import vistack_danmaku, vistack_videos
from .services import VideoNotFound
from .state import Vistack

#: Longest playback offset a danmaku may name (a day of video).
MAX_OFFSET_MS: Final = 24 * 3600 * 1000
#: Most danmaku one window answer holds.
MAX_WINDOW: Final = 5000
#: How long a video's existence is remembered by a process (posts come in bursts).
_KNOWN_FOR_S: Final = 10.0


class RateLimited(errors.HubError):
    """The poster's bucket is empty: retry after ``retry_after_s``."""

    def __init__(self, what: str, retry_after_s: float) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(f"too many {what} from this user: retry in {retry_after_s:.1f} s")


class DanmakuPost(pydantic.BaseModel):
    """One bullet comment as a viewer posts it."""

    model_config = pydantic.ConfigDict(extra="forbid")

    offsetMs: int = pydantic.Field(ge=0, le=MAX_OFFSET_MS, description="playback time, ms")
    text: str = pydantic.Field(min_length=1, max_length=100)
    color: str = pydantic.Field("#ffffff", pattern=r"^#[0-9a-fA-F]{6}$")
    mode: Literal["scroll", "top", "bottom"] = "scroll"

    @pydantic.field_validator("text")
    @classmethod
    def _visible(cls, value: str) -> str:
        value = value.strip()
        if not value:
            raise ValueError("a danmaku needs visible text")
        return value


class DanmakuView(pydantic.BaseModel):
    """A stored, visible danmaku."""

    danmakuId: str
    userId: str
    offsetMs: int
    text: str
    color: str
    mode: str
    postedAt: int


def view(row: Mapping[str, Any]) -> DanmakuView:
    return DanmakuView(
        danmakuId=row["id"],
        userId=row["user_id"],
        offsetMs=row["offset_ms"],
        text=row["text"],
        color=row["color"],
        mode=row["mode"],
        postedAt=row["posted_at"],
    )


class KnownVideos:
    """Which (tenant, video) exist, remembered briefly so a burst of posts costs one read."""

    def __init__(self) -> None:
        self._known: TTLCache[tuple[str, str], bool] = TTLCache(maxsize=10_000, ttl=_KNOWN_FOR_S)

    async def check(self, vs: Vistack, tenant_id: str, video_id: str) -> None:
        """VideoNotFound unless the tenant has the video."""
        key = (tenant_id, video_id)
        if key in self._known:
            return
        t = vistack_videos
        async with reader(vs.hub.engine) as conn:
            found = await conn.scalar(
                sa.select(t.c.id).where(t.c.id == video_id, t.c.tenant_id == tenant_id)
            )
        if found is None:
            raise VideoNotFound(video_id)
        self._known[key] = True


async def limit(vs: Vistack, what: str, key: str, rate_per_s: float, burst: float) -> None:
    """Take one token of ``key``'s bucket, or RateLimited."""
    decision = await vs.hub.cache.limiter.acquire(f"vistack:{what}:{key}", rate_per_s, burst)
    if not decision.allowed:
        raise RateLimited(what, decision.retry_after_s)


async def post(
    vs: Vistack,
    known: KnownVideos,
    *,
    tenant_id: str,
    user_id: str,
    video_id: str,
    body: DanmakuPost,
) -> str:
    """Queue one danmaku; its id. VideoNotFound, RateLimited."""
    await known.check(vs, tenant_id, video_id)
    s = vs.settings
    await limit(vs, "danmaku", f"{tenant_id}:{user_id}", s.danmaku_per_s, s.danmaku_burst)
    danmaku_id = f"dm_{new_id().hex}"
    message = events.Danmaku(
        danmakuId=danmaku_id,
        videoId=video_id,
        tenantId=tenant_id,
        userId=user_id,
        offsetMs=body.offsetMs,
        text=body.text,
        color=body.color.lower(),
        mode=body.mode,
        postedAt=vs.hub.clock.now_ms(),
    )
    env = Envelope.new(
        events.DANMAKU,
        message.model_dump(mode="json"),
        key=video_id,
        source=events.API_SVC,
        tenant_id=tenant_id,
    )
    await vs.hub.service_call(lambda conn: vs.hub.outbox.add(conn, [env]))
    return danmaku_id


async def window(
    vs: Vistack, *, tenant_id: str, video_id: str, from_ms: int, to_ms: int, limit_n: int
) -> list[DanmakuView]:
    """The visible danmaku of ``[from_ms, to_ms)`` of playback, by offset then posting."""
    t = vistack_danmaku
    query = (
        sa.select(t)
        .where(
            t.c.video_id == video_id,
            t.c.tenant_id == tenant_id,
            t.c.status == "visible",
            t.c.offset_ms >= from_ms,
            t.c.offset_ms < to_ms,
        )
        .order_by(t.c.offset_ms, t.c.id)
        .limit(limit_n)
    )
    async with reader(vs.hub.engine) as conn:
        rows: Sequence[Any] = (await conn.execute(query)).mappings().all()
    return [view(r) for r in rows]
