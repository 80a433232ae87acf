"""A transcoder answering UNAVAILABLE every time, on a manual clock: attempts 1…7, each
next one after the seed's delay (1, 2, 4, 8, 16, 32 minutes, ±20 %) through the retry ZSET
and the dispatcher; the 7th failure dead-letters the transcode, fails the video and raises
the alert (webhook, counter); the transcoder fixed, a replay from the console's DLQ page
publishes the video."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI, Request
from prometheus_client import REGISTRY

from aigc_hub.cache.memory import MemoryCache
from aigc_hub.core.clock import ManualClock
from aigc_hub.pipelines.vistack import rules
from aigc_hub.reliability.dlq import DeadLetterFilter
from tests.support.hubs import make_broker, wait_until
from tests.support.served import serve
from tests.support.vistack import (
    make_clip,
    running_transcoder,
    upload_video,
    video_moves,
    video_row,
    vistack_stack,
)

GAVE_UP = "aigc_hub_vistack_transcode_gave_up_total"


async def test_an_unavailable_transcoder_is_tried_seven_times_on_the_seeds_delays_then_dead_lettered_alerted_and_replayed(  # noqa: E501
    sqlite_url: str, tmp_path: Path
) -> None:
    alerts: list[dict[str, Any]] = []
    hook = FastAPI()

    @hook.post("/alerts")
    async def receive(request: Request) -> dict[str, str]:
        alerts.append(await request.json())
        return {}

    clock = ManualClock()
    clip = make_clip(tmp_path / "clip.mp4", seconds=1.0)
    gave_up_before = REGISTRY.get_sample_value(GAVE_UP) or 0.0
    async with (
        serve(hook) as hook_url,
        running_transcoder(tmp_path, broken=True) as transcoder,
        vistack_stack(
            sqlite_url,
            make_broker("embedded", tmp_path, clock),
            tmp_path,
            blobs=transcoder.store,
            cache=MemoryCache(clock),
            clock=clock,
            scan=True,
            hub_options={"scanner_lease_ttl_ms": 600, "alert_webhook": f"{hook_url}/alerts"},
            transcoder_address=transcoder.address,
            transcode_deadline_s=30,
        ) as stack,
    ):
        hub = stack.hub
        key = await stack.tenant("site")
        async with stack.client(key) as client:
            video_id = (await upload_video(client, clip, "doomed"))["video_id"]
            for attempt in range(1, 7):

                async def waiting(n: int = attempt) -> bool:
                    row = await video_row(hub, video_id)
                    return row["attempts"] == n and row["status"] == "pending"

                await wait_until(waiting, timeout=60)
                row = await video_row(hub, video_id)
                delay_s = (row["retry_at"] - clock.now_ms()) / 1000
                seed_s = 60 * 2 ** (attempt - 1)
                assert 0.8 * seed_s <= delay_s <= 1.2 * seed_s, (attempt, delay_s)
                assert row["error_code"] == "transcoder_unavailable"
                # Not a moment early: the retry waits in the ZSET until it is due.
                assert await hub.cache.timers.next_due(rules.RETRY_QUEUE) == row["retry_at"]
                await clock.advance(delay_s - 1)
                assert (await video_row(hub, video_id))["attempts"] == attempt
                await clock.advance(1 + 5)  # due, and the dispatcher's next scan

            async def failed() -> bool:
                return (await video_row(hub, video_id))["status"] == "failed"

            await wait_until(failed, timeout=60)
            row = await video_row(hub, video_id)
            assert (row["attempts"], row["error_code"]) == (7, "attempts_exhausted")
            assert transcoder.calls == 7
            [letter] = await hub.dlq.list(DeadLetterFilter(topic="transcode"))
            assert letter.status == "pending"

            async def alerted() -> bool:
                return len(alerts) == 1

            await wait_until(alerted, timeout=30)
            assert alerts[0]["alert"] == "VistackTranscodeGaveUp"
            assert (alerts[0]["video_id"], alerts[0]["attempts"]) == (video_id, 7)
            assert REGISTRY.get_sample_value(GAVE_UP) == gave_up_before + 1

            # The fix, then one click on the console's DLQ page.
            transcoder.broken = False
            admin = await stack.admin()
            async with httpx.AsyncClient(base_url=stack.api_url, trust_env=False) as browser:
                login = await browser.post("/console/login", data={"key": admin})
                assert login.status_code == 303, login.text
                page = await browser.get(f"/console/dlq/{letter.id}")
                csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
                assert csrf is not None, page.text[:2000]
                replay = await browser.post(
                    f"/console/dlq/{letter.id}/replay", data={"csrf": csrf.group(1)}
                )
                assert replay.status_code in (200, 303), replay.text

            async def published() -> bool:
                return (await video_row(hub, video_id))["status"] == "published"

            await wait_until(published, timeout=120)
            row = await video_row(hub, video_id)
            assert (row["retry_epoch"], row["attempts"]) == (1, 1)
            assert transcoder.calls == 8
            moves = await video_moves(hub, video_id)
            # 7 × (processing, then pending or failed), replayed → pending, processing,
            # published: once.
            assert moves.count("published") == 1
            assert moves.count("processing") == 8
            assert moves[-3:] == ["pending", "processing", "published"]
