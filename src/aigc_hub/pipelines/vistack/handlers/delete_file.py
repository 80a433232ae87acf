"""``delete_file`` in the seed's consumer group: a video and everything of it, in the seed's
order.

1. the idempotency check: no row means an earlier delivery finished (rows go last, so no
   object is left then); the video's lease (the transcode's own, so no transcode runs
   meanwhile: one running makes this record retry later);
2. the objects: the original, every object under ``dash/{videoID}/``, the cover;
3. one transaction: the video's danmaku, comments, history and row.

A delivery that dies between 2 and 3 leaves the row: the redelivery deletes the objects
again (absent ones are fine) and finishes the transaction.
"""

from __future__ import annotations

import sqlalchemy as sa

from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import RetryableError
from aigc_hub.runtime.context import HandlerContext
from aigc_hub.store.engine import reader

from .. import events, records, rules, services
from ..models import vistack_comments, vistack_danmaku, vistack_video_events, vistack_videos
from ..records import Video
from ..state import Vistack
from . import consumer

#: Where a crash test kills a worker: objects deleted, rows not yet.
AFTER_OBJECTS = "vistack.delete_file.after_objects"


class VideoBusy(RetryableError):
    """A transcode of the video holds its lease: the delete waits for it to end."""


@consumer.handles(events.DELETE_FILE)
async def on_delete_file(vs: Vistack, env: Envelope, ctx: HandlerContext) -> list[Envelope]:
    """Delete the video of ``env`` unless an earlier delivery did."""
    assert isinstance(ctx.payload, events.DeleteFile)
    video_id = ctx.payload.videoId
    async with reader(vs.hub.engine) as conn:
        video = await records.load(conn, video_id)
    if video is None or video.tenant_id != ctx.payload.tenantId:
        return []
    leases = vs.hub.cache.leases
    lease = await leases.acquire(
        rules.lease_name(video_id), vs.owner, int(vs.settings.lease_s * 1000)
    )
    if lease is None:
        raise VideoBusy(f"video {video_id} is being transcoded; its delete waits")
    try:
        await _delete_objects(vs, video)
        vs.hub.failpoints.hit(AFTER_OBJECTS)
        await _delete_rows(vs, video_id)
    finally:
        await leases.release(lease)
    return []


async def _delete_objects(vs: Vistack, video: Video) -> None:
    """The original, everything under the video's DASH prefix (every run's), the cover."""
    store = vs.store
    await store.delete(video.row["source_key"])
    prefix = services.dash_prefix(video.tenant_id, video.id)
    keys = [listed.key async for listed in store.list_objects(prefix)]
    for key in keys:
        await store.delete(key)
    await store.delete(services.cover_key(video.tenant_id, video.id))


async def _delete_rows(vs: Vistack, video_id: str) -> None:
    """The video's interactions, history and row, in one transaction."""
    async with vs.hub.transaction() as conn:
        await conn.execute(sa.delete(vistack_danmaku).where(vistack_danmaku.c.video_id == video_id))
        await conn.execute(
            sa.delete(vistack_comments).where(vistack_comments.c.video_id == video_id)
        )
        await conn.execute(
            sa.delete(vistack_video_events).where(vistack_video_events.c.video_id == video_id)
        )
        await conn.execute(sa.delete(vistack_videos).where(vistack_videos.c.id == video_id))
