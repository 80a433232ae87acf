"""Danmaku on embedded defaults, through the real API: 10,000 from 50 users over two videos
are all stored once and arrive on the live feed of each of two viewers in each user's posting
order (and nothing of the other video); the window answers them by playback time; a flooder
gets 429 past the burst while another user is unaffected; a text moderation refuses is
stored rejected, shown nowhere, and not retried."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from aigc_hub.core.envelope import Envelope
from aigc_hub.pipelines.vistack import events
from aigc_hub.pipelines.vistack.models import vistack_danmaku
from aigc_hub.store.tables import dead_letters
from aigc_hub.tenancy import create_tenant, create_tenant_key
from tests.support.hubs import make_broker, wait_until
from tests.support.sse import FrameReader
from tests.support.vistack import handled, published_video, vistack_stack

USERS = 50
PER_USER = 200  # 10,000 in all


async def _stored(hub: Any, **where: str) -> int:
    t = vistack_danmaku
    query = sa.select(sa.func.count()).select_from(t)
    for column, value in where.items():
        query = query.where(t.c[column] == value)
    async with hub.engine.connect() as conn:
        return int(await conn.scalar(query) or 0)


async def _collect(reader: FrameReader, want: int, into: list[dict[str, Any]]) -> None:
    while len(into) < want:
        frame = await reader.next(timeout=60)
        assert frame.event != "reset", frame
        if frame.event == "danmaku":
            into.append(frame.json())


async def test_ten_thousand_danmaku_from_fifty_users_arrive_in_order_on_two_live_feeds(
    sqlite_url: str, tmp_path: Path
) -> None:
    async with vistack_stack(
        sqlite_url,
        make_broker("embedded", tmp_path),
        tmp_path,
        danmaku_per_s=10_000,
        danmaku_burst=10_000,
    ) as stack:
        hub = stack.hub
        tenant, viewer_key = await create_tenant(hub.engine, "site")
        watched = await published_video(hub, tenant.id, "watched")
        other = await published_video(hub, tenant.id, "other")
        keys = [await create_tenant_key(hub.engine, tenant.id) for _ in range(USERS)]
        clients = [stack.client(k) for k in keys]
        posted: dict[tuple[str, int], list[str]] = {}
        async with (
            stack.client(viewer_key) as viewer_a,
            stack.client(viewer_key) as viewer_b,
            viewer_a.stream("GET", f"/v1/vistack/videos/{watched}/danmaku/live") as live_a,
            viewer_b.stream("GET", f"/v1/vistack/videos/{watched}/danmaku/live") as live_b,
        ):
            readers = [FrameReader(live_a), FrameReader(live_b)]
            try:
                for r in readers:
                    assert (await r.next()).comments == ["ready"]
                seen: list[list[dict[str, Any]]] = [[], []]
                want = USERS * PER_USER // 2
                watching = [
                    asyncio.create_task(_collect(r, want, s))
                    for r, s in zip(readers, seen, strict=True)
                ]

                async def user(n: int) -> None:
                    rng = random.Random(n)
                    for i in range(PER_USER):
                        video = watched if i % 2 == 0 else other
                        answer = await clients[n].post(
                            f"/v1/vistack/videos/{video}/danmaku",
                            json={
                                "offsetMs": rng.randrange(60_000),
                                "text": f"user {n} says {i}",
                                "color": "#ff00aa",
                                "mode": rng.choice(["scroll", "top", "bottom"]),
                            },
                        )
                        assert answer.status_code == 202, answer.text
                        posted.setdefault((video, n), []).append(answer.json()["id"])

                await asyncio.gather(*(user(n) for n in range(USERS)))
                await asyncio.wait_for(asyncio.gather(*watching), 120)
            finally:
                for r in readers:
                    await r.aclose()
                for c in clients:
                    await c.aclose()

        async def all_stored() -> bool:
            return await _stored(hub) == USERS * PER_USER

        await wait_until(all_stored, timeout=120)
        # Each viewer: every danmaku of the watched video once, none of the other, and each
        # user's in the order that user posted them.
        for feed in seen:
            ids = [d["danmakuId"] for d in feed]
            assert len(ids) == len(set(ids)) == want
            for n in range(USERS):
                mine = [d["danmakuId"] for d in feed if d["text"].startswith(f"user {n} says")]
                assert mine == posted[(watched, n)], n
        # The window: by playback time, then posting; complete.
        async with stack.client(viewer_key) as client:
            for video in (watched, other):
                items: list[dict[str, Any]] = []
                for start in range(0, 60_000, 15_000):
                    window = await client.get(
                        f"/v1/vistack/videos/{video}/danmaku",
                        params={"from": start, "to": start + 15_000, "limit": 5000},
                    )
                    assert window.status_code == 200, window.text
                    items += window.json()["items"]
                assert len(items) == want
                keys_in_order = [(d["offsetMs"], d["danmakuId"]) for d in items]
                assert keys_in_order == sorted(keys_in_order)
                assert {d["danmakuId"] for d in items} == {
                    i for (v, _n), ids in posted.items() if v == video for i in ids
                }
            # A redelivered danmaku (its message again, under a new envelope) adds no row.
            again = events.Danmaku(
                danmakuId=posted[(watched, 0)][0],
                videoId=watched,
                tenantId=tenant.id,
                userId="u",
                offsetMs=1,
                text="again",
                color="#ffffff",
                mode="scroll",
                postedAt=1,
            )
            env = Envelope.new(
                events.DANMAKU, again.model_dump(), key=watched, source="test", tenant_id=tenant.id
            )
            async with hub.transaction() as conn:
                await hub.outbox.add(conn, [env])

            await wait_until(lambda: handled(hub, env.event_id), timeout=60)
            assert await _stored(hub) == USERS * PER_USER


async def test_a_flooder_is_refused_past_the_burst_and_others_are_not(
    sqlite_url: str, tmp_path: Path
) -> None:
    async with vistack_stack(sqlite_url, make_broker("embedded", tmp_path), tmp_path) as stack:
        hub = stack.hub
        tenant, flooder_key = await create_tenant(hub.engine, "site")
        calm_key = await create_tenant_key(hub.engine, tenant.id)
        video = await published_video(hub, tenant.id)
        body = {"offsetMs": 1000, "text": "spam", "color": "#ffffff", "mode": "scroll"}
        async with stack.client(flooder_key) as flooder, stack.client(calm_key) as calm:
            answers = await asyncio.gather(
                *(
                    flooder.post(f"/v1/vistack/videos/{video}/danmaku", json=body)
                    for _ in range(100)
                )
            )
            codes = [a.status_code for a in answers]
            # The default bucket: a burst of 20 (and a few refilled at 5/s meanwhile).
            assert 20 <= codes.count(202) < 40, codes
            refused = [a for a in answers if a.status_code == 429]
            assert refused and refused[0].headers["content-type"].startswith(
                "application/problem+json"
            )
            assert float(refused[0].headers["retry-after"]) > 0
            assert refused[0].json()["type"].endswith("rate-limited")
            mine = await asyncio.gather(
                *(
                    calm.post(
                        f"/v1/vistack/videos/{video}/danmaku", json=body | {"text": f"hi {i}"}
                    )
                    for i in range(10)
                )
            )
            assert [a.status_code for a in mine] == [202] * 10
            # Bad input: problem bodies, not 500s.
            for bad in (
                {**body, "color": "red"},
                {**body, "mode": "sideways"},
                {**body, "offsetMs": -1},
                {**body, "text": "   "},
                {**body, "text": "x" * 101},
            ):
                answer = await calm.post(f"/v1/vistack/videos/{video}/danmaku", json=bad)
                assert answer.status_code == 422, (bad, answer.text)
            unknown = await calm.post(f"/v1/vistack/videos/vid_{'0' * 32}/danmaku", json=body)
            assert unknown.status_code == 404


async def test_a_danmaku_moderation_refuses_is_stored_rejected_shown_nowhere_and_not_retried(
    sqlite_url: str, tmp_path: Path
) -> None:
    async with vistack_stack(sqlite_url, make_broker("embedded", tmp_path), tmp_path) as stack:
        hub = stack.hub
        tenant, key = await create_tenant(hub.engine, "site")
        video = await published_video(hub, tenant.id)
        async with (
            stack.client(key) as client,
            client.stream("GET", f"/v1/vistack/videos/{video}/danmaku/live") as live,
        ):
            reader = FrameReader(live)
            try:
                assert (await reader.next()).comments == ["ready"]
                bad = await client.post(
                    f"/v1/vistack/videos/{video}/danmaku",
                    json={"offsetMs": 5, "text": "how to make a pipe bomb at home"},
                )
                good = await client.post(
                    f"/v1/vistack/videos/{video}/danmaku", json={"offsetMs": 6, "text": "nice"}
                )
                assert bad.status_code == good.status_code == 202
                frame = await reader.next(timeout=60)
                while frame.event != "danmaku":
                    frame = await reader.next(timeout=60)
                assert frame.json()["danmakuId"] == good.json()["id"]
            finally:
                await reader.aclose()
            window = (await client.get(f"/v1/vistack/videos/{video}/danmaku")).json()["items"]
            assert [d["danmakuId"] for d in window] == [good.json()["id"]]
        async with hub.engine.connect() as conn:
            row = (
                (
                    await conn.execute(
                        sa.select(vistack_danmaku).where(vistack_danmaku.c.id == bad.json()["id"])
                    )
                )
                .mappings()
                .one()
            )
            letters = await conn.scalar(sa.select(sa.func.count()).select_from(dead_letters))
        assert row["status"] == "rejected" and "weapons" in row["reason"]
        assert letters == 0  # a decision, not a failure: no retry, no dead letter
