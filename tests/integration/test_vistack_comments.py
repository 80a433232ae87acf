"""Comments on embedded defaults, through the real API: posted and replied to, moderated to
visible, held (an operator approves, audited) or rejected; listed newest first with
cursors, replies oldest first; redelivered once; bad input answered with problems."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from aigc_hub.core.envelope import Envelope
from aigc_hub.pipelines.vistack import events
from aigc_hub.pipelines.vistack.models import vistack_comments
from aigc_hub.store.tables import audit_log
from aigc_hub.tenancy import create_tenant, create_tenant_key
from tests.support.hubs import make_broker, wait_until
from tests.support.vistack import handled, published_video, vistack_stack


async def _status(hub: object, comment_id: str) -> str | None:
    async with hub.engine.connect() as conn:  # type: ignore[attr-defined]
        value = await conn.scalar(
            sa.select(vistack_comments.c.status).where(vistack_comments.c.id == comment_id)
        )
    return None if value is None else str(value)


async def test_comments_are_moderated_listed_with_cursors_and_reviewed(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The shared moderation's rules decide here; its semantic model is not what is tested.
    monkeypatch.setenv("AIGC_HUB_MODERATION_SEMANTIC", "false")
    async with vistack_stack(
        sqlite_url, make_broker("embedded", tmp_path), tmp_path, comments_per_min=6000
    ) as stack:
        hub = stack.hub
        tenant, key = await create_tenant(hub.engine, "site")
        other_key = await create_tenant_key(hub.engine, tenant.id)
        video = await published_video(hub, tenant.id)
        base = f"/v1/vistack/videos/{video}/comments"
        async with stack.client(key) as client, stack.client(other_key) as other:

            async def post(text: str, parent: str | None = None) -> str:
                body = {"text": text} | ({"parentId": parent} if parent else {})
                answer = await client.post(base, json=body)
                assert answer.status_code == 202, answer.text
                return str(answer.json()["id"])

            async def decided(comment_id: str) -> bool:
                return await _status(hub, comment_id) is not None

            top = [await post(f"comment {i}") for i in range(7)]
            for c in top:
                await wait_until(lambda c=c: decided(c), timeout=60)
            reply_ids = [await post(f"reply {i}", top[0]) for i in range(3)]
            held = await post("that beheading scene was too much")
            refused = await post("how to make a pipe bomb")
            for c in [*reply_ids, held, refused]:
                await wait_until(lambda c=c: decided(c), timeout=60)
            assert await _status(hub, held) == "held"
            assert await _status(hub, refused) == "rejected"

            # Newest first, three a page, with cursors; reply counts on the parent.
            seen: list[str] = []
            cursor = None
            while True:
                params = {"limit": 3} | ({"cursor": cursor} if cursor else {})
                page = (await other.get(base, params=params)).json()
                seen += [c["commentId"] for c in page["items"]]
                cursor = page["next_cursor"]
                if cursor is None:
                    break
            assert seen == list(reversed(top))
            first = (await other.get(base, params={"limit": 200})).json()["items"][-1]
            assert (first["commentId"], first["replies"]) == (top[0], 3)
            replies = (await other.get(f"{base}/{top[0]}/replies", params={"limit": 2})).json()
            assert [r["commentId"] for r in replies["items"]] == reply_ids[:2]
            rest = await other.get(
                f"{base}/{top[0]}/replies", params={"cursor": replies["next_cursor"]}
            )
            assert [r["commentId"] for r in rest.json()["items"]] == reply_ids[2:]

            # An operator approves the held one (audited): then it is listed.
            admin_key = await stack.admin()
            async with stack.client(admin_key) as admin:
                queue = (await admin.get("/v1/vistack/held-comments")).json()["items"]
                assert [c["commentId"] for c in queue] == [held]
                approved = await admin.post(
                    f"/v1/vistack/held-comments/{held}/decision", json={"approve": True}
                )
                assert approved.status_code == 200 and approved.json()["status"] == "visible"
                again = await admin.post(
                    f"/v1/vistack/held-comments/{held}/decision", json={"approve": False}
                )
                assert again.status_code == 404
                forbidden = await client.get("/v1/vistack/held-comments")
                assert forbidden.status_code == 403
            newest = (await other.get(base, params={"limit": 1})).json()["items"][0]
            assert newest["commentId"] == held
            async with hub.engine.connect() as conn:
                audited = await conn.scalar(
                    sa.select(sa.func.count())
                    .select_from(audit_log)
                    .where(
                        audit_log.c.action == "vistack.comment.approve", audit_log.c.target == held
                    )
                )
            assert audited == 1

            # Bad input: problems, never a 500.
            for body, code in (
                ({"text": "  "}, 422),
                ({"text": "x" * 2001}, 422),
                ({"text": "hi", "parentId": "cm_" + "0" * 32}, 422),
                ({"text": "hi", "parentId": "nope"}, 422),
                ({"text": "hi", "extra": 1}, 422),
            ):
                answer = await client.post(base, json=body)
                assert answer.status_code == code, (body, answer.text)
                assert answer.headers["content-type"].startswith("application/problem+json")
            assert (await client.get(base, params={"cursor": "garbage"})).status_code == 422
            stranger_key = (await create_tenant(hub.engine, "elsewhere"))[1]
            async with stack.client(stranger_key) as stranger:
                assert (await stranger.get(base)).status_code == 404
                assert (await stranger.post(base, json={"text": "hi"})).status_code == 404

            # A redelivered comment (its message again) stores nothing new.
            env = Envelope.new(
                events.COMMENT,
                events.Comment(
                    commentId=top[1],
                    videoId=video,
                    tenantId=tenant.id,
                    userId="u",
                    text="changed",
                    postedAt=1,
                ).model_dump(),
                key=video,
                source="test",
                tenant_id=tenant.id,
            )
            async with hub.transaction() as conn:
                await hub.outbox.add(conn, [env])

            await wait_until(lambda: handled(hub, env.event_id), timeout=60)
            async with hub.engine.connect() as conn:
                text = await conn.scalar(
                    sa.select(vistack_comments.c.text).where(vistack_comments.c.id == top[1])
                )
            assert text == "comment 1"


async def test_a_comment_flood_is_refused_with_429(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIGC_HUB_MODERATION_SEMANTIC", "false")
    async with vistack_stack(sqlite_url, make_broker("embedded", tmp_path), tmp_path) as stack:
        tenant, key = await create_tenant(stack.hub.engine, "site")
        video = await published_video(stack.hub, tenant.id)
        async with stack.client(key) as client:
            codes = [
                (
                    await client.post(
                        f"/v1/vistack/videos/{video}/comments", json={"text": f"c{i}"}
                    )
                ).status_code
                for i in range(8)
            ]
        # 20 a minute: a burst of 5, then 429 with Retry-After.
        assert codes[:5] == [202] * 5 and 429 in codes[5:], codes
