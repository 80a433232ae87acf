"""Comments and replies: posting, moderation's outcome, listing with cursors, review.

A post is checked (the video is the tenant's; a reply's parent is a comment of the same
video), counted against the poster's bucket (``AIGC_HUB_VISTACK_COMMENTS_PER_MIN``) and
written to the outbox as a ``comment`` message (202 with its ``cm_<uuid7>`` id). The handler
moderates it with the shared module: allowed (or watermark) → ``visible``, human review →
``held`` until an operator approves or rejects it, reject → ``rejected`` with the reason.
Lists show visible comments only: top-level newest first, replies oldest first, each page
with an opaque cursor (keyset on the id).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any, Final, Literal

import pydantic
import sqlalchemy as sa

from aigc_hub.core import errors
from aigc_hub.core.envelope import Envelope
from aigc_hub.core.ids import new_id
from aigc_hub.moderation.base import Decision, Verdict
from aigc_hub.reliability import audit
from aigc_hub.store.engine import reader

from . import events
from .danmaku import KnownVideos, limit
from .models import vistack_comments
from .state import Vistack

COMMENT_ID: Final = r"^cm_[0-9a-f]{32}$"
Status = Literal["visible", "held", "rejected"]


class CommentNotFound(errors.NotFound):
    """No comment of this video (and tenant) has this id."""


class BadCursor(errors.InvalidInput):
    """A cursor this API did not hand out."""

    def __init__(self) -> None:
        super().__init__("cursor", "not a cursor of this list: start without one")


class CommentPost(pydantic.BaseModel):
    """A comment, or a reply to one."""

    model_config = pydantic.ConfigDict(extra="forbid")

    text: str = pydantic.Field(min_length=1, max_length=2000)
    parentId: str | None = pydantic.Field(None, pattern=COMMENT_ID)

    @pydantic.field_validator("text")
    @classmethod
    def _visible(cls, value: str) -> str:
        value = value.strip()
        if not value:
            raise ValueError("a comment needs visible text")
        return value


class CommentView(pydantic.BaseModel):
    """A comment as listed."""

    commentId: str
    userId: str
    parentId: str | None
    text: str
    status: Status
    postedAt: int
    replies: int = 0


class CommentPage(pydantic.BaseModel):
    """A page of comments; ``next_cursor`` pages on (None: the last page)."""

    items: list[CommentView]
    next_cursor: str | None


def encode_cursor(comment_id: str) -> str:
    """The opaque cursor after ``comment_id``."""
    return base64.urlsafe_b64encode(comment_id.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    """The comment id a cursor stands after; BadCursor otherwise."""
    try:
        comment_id = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        raise BadCursor() from None
    if not (comment_id.startswith("cm_") and len(comment_id) == 35):
        raise BadCursor()
    return comment_id


def status_of(decision: Decision) -> Status:
    """Where moderation puts a comment."""
    if decision.verdict is Verdict.REJECT:
        return "rejected"
    if decision.verdict is Verdict.HUMAN_REVIEW:
        return "held"
    return "visible"  # allow, watermark (a mark is for generated media; text shows as is)


def view(row: Mapping[Any, Any], replies: int = 0) -> CommentView:
    return CommentView(
        commentId=row["id"],
        userId=row["user_id"],
        parentId=row["parent_id"],
        text=row["text"],
        status=row["status"],
        postedAt=row["posted_at"],
        replies=replies,
    )


async def post(
    vs: Vistack,
    known: KnownVideos,
    *,
    tenant_id: str,
    user_id: str,
    video_id: str,
    body: CommentPost,
) -> str:
    """Queue one comment; its id. VideoNotFound, CommentNotFound (parent), RateLimited."""
    await known.check(vs, tenant_id, video_id)
    if body.parentId is not None:
        await _parent(vs, tenant_id, video_id, body.parentId)
    per_s = vs.settings.comments_per_min / 60
    await limit(vs, "comments", f"{tenant_id}:{user_id}", per_s, max(1.0, per_s * 60 / 4))
    comment_id = f"cm_{new_id().hex}"
    message = events.Comment(
        commentId=comment_id,
        videoId=video_id,
        tenantId=tenant_id,
        userId=user_id,
        parentId=body.parentId,
        text=body.text,
        postedAt=vs.hub.clock.now_ms(),
    )
    env = Envelope.new(
        events.COMMENT,
        message.model_dump(mode="json"),
        key=video_id,
        source=events.API_SVC,
        tenant_id=tenant_id,
    )
    await vs.hub.service_call(lambda conn: vs.hub.outbox.add(conn, [env]))
    return comment_id


async def _parent(vs: Vistack, tenant_id: str, video_id: str, parent_id: str) -> None:
    """InvalidInput unless ``parent_id`` is a stored comment of the video."""
    t = vistack_comments
    async with reader(vs.hub.engine) as conn:
        found = await conn.scalar(
            sa.select(t.c.id).where(
                t.c.id == parent_id, t.c.video_id == video_id, t.c.tenant_id == tenant_id
            )
        )
    if found is None:
        raise errors.InvalidInput("parentId", f"{parent_id} is not a comment of this video")


async def listing(
    vs: Vistack,
    *,
    tenant_id: str,
    video_id: str,
    parent_id: str | None,
    cursor: str | None,
    limit_n: int,
) -> CommentPage:
    """Visible top-level comments newest first, or a comment's visible replies oldest first."""
    t = vistack_comments
    after = decode_cursor(cursor) if cursor else None
    query = sa.select(t).where(
        t.c.video_id == video_id, t.c.tenant_id == tenant_id, t.c.status == "visible"
    )
    if parent_id is None:
        query = query.where(t.c.parent_id.is_(None)).order_by(t.c.id.desc())
        if after:
            query = query.where(t.c.id < after)
    else:
        query = query.where(t.c.parent_id == parent_id).order_by(t.c.id)
        if after:
            query = query.where(t.c.id > after)
    async with reader(vs.hub.engine) as conn:
        rows = (await conn.execute(query.limit(limit_n + 1))).mappings().all()
        page = rows[:limit_n]
        counts: dict[str, int] = {}
        if parent_id is None and page:
            counted = await conn.execute(
                sa.select(t.c.parent_id, sa.func.count())
                .where(t.c.parent_id.in_([r["id"] for r in page]), t.c.status == "visible")
                .group_by(t.c.parent_id)
            )
            counts = {str(p): int(n) for p, n in counted.all()}
    items = [view(r, counts.get(r["id"], 0)) for r in page]
    more = len(rows) > limit_n
    return CommentPage(items=items, next_cursor=encode_cursor(page[-1]["id"]) if more else None)


async def held(vs: Vistack, *, limit_n: int) -> list[dict[str, Any]]:
    """Comments held for review, oldest first (every tenant: an operator's queue)."""
    t = vistack_comments
    async with reader(vs.hub.engine) as conn:
        rows = await conn.execute(
            sa.select(t).where(t.c.status == "held").order_by(t.c.id).limit(limit_n)
        )
        return [
            {**view(r).model_dump(), "videoId": r["video_id"], "reason": r["reason"]}
            for r in rows.mappings()
        ]


async def decide(
    vs: Vistack, *, comment_id: str, approve: bool, actor: str, note: str
) -> CommentView:
    """An operator's decision on a held comment (audited). CommentNotFound unless held."""
    t = vistack_comments
    now = vs.hub.clock.now_ms()
    to = "visible" if approve else "rejected"
    async with vs.hub.transaction() as conn:
        row = (
            (
                await conn.execute(
                    sa.update(t)
                    .where(t.c.id == comment_id, t.c.status == "held")
                    .values(status=to, decided_at=now, reason=note[:200] or None)
                    .returning(t)
                )
            )
            .mappings()
            .first()
        )
        if row is None:
            raise CommentNotFound(f"no held comment {comment_id}")
        await audit.record(
            conn,
            at=now,
            actor=actor,
            action="vistack.comment.approve" if approve else "vistack.comment.reject",
            target=comment_id,
            result=to,
            detail={"video_id": row["video_id"], "note": note[:200]},
        )
    return view(row)
