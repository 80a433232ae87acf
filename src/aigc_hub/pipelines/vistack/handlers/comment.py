"""``comment`` in the seed's consumer group: moderate, then store visible, held or rejected.

The row is keyed by the comment's id and inserted once (a redelivery inserts nothing).
A refusal is a decision, never retried; moderation itself being down (its model) is
retryable, and the record waits.
"""

from __future__ import annotations

from aigc_hub.core.envelope import Envelope
from aigc_hub.runtime.context import HandlerContext, RowInsert

from .. import comments, events
from ..models import vistack_comments
from ..state import Vistack
from . import consumer


@consumer.handles(events.COMMENT)
async def on_comment(vs: Vistack, env: Envelope, ctx: HandlerContext) -> list[Envelope]:
    """Moderate one comment and store it where moderation puts it."""
    c = ctx.payload_as(events.Comment)
    decision = await vs.moderation.review_text(c.text, tenant_id=c.tenantId)
    status = comments.status_of(decision)
    ctx.write(
        RowInsert(
            vistack_comments,
            {
                "id": c.commentId,
                "video_id": c.videoId,
                "tenant_id": c.tenantId,
                "user_id": c.userId,
                "parent_id": c.parentId,
                "text": c.text,
                "status": status,
                "reason": None if status == "visible" else decision.reason[:200],
                "posted_at": c.postedAt,
                "decided_at": vs.hub.clock.now_ms(),
            },
            ignore_conflict=True,
        )
    )
    return []
