"""``<group_id>-danmaku``: the danmaku writers, a batch group (batched inserts).

Each batch: every text through the shared moderation module (rules only: danmaku come by
the thousand a second, the semantic model is the comments' and prompts'); every danmaku one
row, ``visible`` or ``rejected`` with the reason (a refusal is a decision, never retried),
inserted with its record's commit, the commits of a batch going together (the committer
sends them as one multi-row insert), duplicates ignored (the id is the key: a redelivered
record inserts nothing). With the last record of the batch for each video goes one
notification (``kind`` ``messages``) carrying that video's visible danmaku of the batch in
posting order: the live feed's items.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aigc_hub.core.envelope import Envelope
from aigc_hub.pipeline import BatchResults
from aigc_hub.reliability.notifications import Notification, notification_envelope
from aigc_hub.runtime.context import HandlerContext, RowInsert

from .. import events
from ..models import vistack_danmaku
from ..records import SUBJECT
from ..state import Vistack


async def on_danmaku(vs: Vistack, items: Sequence[tuple[Envelope, HandlerContext]]) -> BatchResults:
    """Moderate and store a batch of danmaku; announce each video's visible ones."""
    now = vs.hub.clock.now_ms()
    posted = [ctx.payload_as(events.Danmaku) for _env, ctx in items]
    last_of_video: dict[str, int] = {}
    visible: dict[str, list[dict[str, Any]]] = {}
    for i, (d, (_env, ctx)) in enumerate(zip(posted, items, strict=True)):
        decision = await vs.danmaku_moderation.review_text(d.text, tenant_id=d.tenantId)
        status = "visible" if decision.allowed else "rejected"
        row = {
            "id": d.danmakuId,
            "video_id": d.videoId,
            "tenant_id": d.tenantId,
            "user_id": d.userId,
            "offset_ms": d.offsetMs,
            "text": d.text,
            "color": d.color,
            "mode": d.mode,
            "status": status,
            "reason": None if decision.allowed else decision.reason[:200],
            "posted_at": d.postedAt,
            "stored_at": now,
        }
        ctx.write(RowInsert(vistack_danmaku, row, ignore_conflict=True))
        last_of_video[d.videoId] = i
        if decision.allowed:
            visible.setdefault(d.videoId, []).append(
                {
                    "danmakuId": d.danmakuId,
                    "userId": d.userId,
                    "offsetMs": d.offsetMs,
                    "text": d.text,
                    "color": d.color,
                    "mode": d.mode,
                    "postedAt": d.postedAt,
                }
            )
    results: list[list[Envelope] | Exception] = [[] for _ in items]
    for video_id, i in last_of_video.items():
        shown = sorted(visible.get(video_id, []), key=lambda x: str(x["danmakuId"]))
        if shown:
            results[i] = [_feed_item(posted[i].tenantId, video_id, shown, now)]
    return results


def _feed_item(tenant_id: str, video_id: str, shown: list[dict[str, Any]], at: int) -> Envelope:
    note = Notification(
        tenant_id=tenant_id,
        subject_type=SUBJECT,
        subject_id=video_id,
        kind="messages",
        occurred_at_ms=at,
        data={"danmaku": shown},
    )
    return notification_envelope(note, source="vistack")
