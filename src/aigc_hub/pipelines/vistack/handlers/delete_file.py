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

from .. import events, records, rules, services
from ..models import vistack_comments, vistack_danmaku, vistack_video_events, vistack_videos
from ..records import Video
from ..state import Vistack
from . import consumer

#: How long a delete holds the video's lease: deletes are quick, and a worker that died
#: mid-delete must not hold up the redelivery for a transcode's half hour.
DELETE_LEASE_MS = 120_000
#: Where a crash test kills a worker: objects deleted, rows not yet.
AFTER_OBJECTS = "vistack.delete_file.after_objects"


class VideoBusy(RetryableError):
    """A transcode of the video holds its lease: the delete waits for it to end."""


@consumer.handles(events.DELETE_FILE)
async def on_delete_file(vs: Vistack, env: Envelope, ctx: HandlerContext) -> list[Envelope]:
    """Delete the video of ``env`` unless an earlier delivery did."""
    assert isinstance(ctx.payload, events.DeleteFile)
    video_id = ctx.payload.videoId
    async with ctx.read() as conn:
        video = await records.load(conn, video_id)
    if video is None or video.tenant_id != ctx.payload.tenantId:
        return []
    leases = vs.hub.cache.leases
    lease = await leases.acquire(rules.lease_name(video_id), vs.owner, DELETE_LEASE_MS)
    if lease is None:
        raise VideoBusy(f"video {video_id} is being transcoded; its delete waits")
    try:
        await _delete_objects(vs, video)
        vs.hub.failpoints.hit(AFTER_OBJECTS)
    except BaseException:
        await leases.release(lease)
        raise
    # The rows go with the record's commit. The lease is kept until it runs out: no
    # transcode starts on a video that is being deleted (a later message finds no row).
    for statement in _row_deletes(video_id):
        ctx.write(statement)
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


def _row_deletes(video_id: str) -> list[sa.Delete]:
    """The video's interactions, history and row (one transaction: the record's commit)."""
    return [
        sa.delete(vistack_danmaku).where(vistack_danmaku.c.video_id == video_id),
        sa.delete(vistack_comments).where(vistack_comments.c.video_id == video_id),
        sa.delete(vistack_video_events).where(vistack_video_events.c.video_id == video_id),
        sa.delete(vistack_videos).where(vistack_videos.c.id == video_id),
    ]
