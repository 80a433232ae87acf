"""A worker SIGKILLed mid-transcode (embedded store and log, leases in Redis): its lease
runs out, the watchdog re-queues the video (processing, no lease), the next worker
transcodes it once more and it is published once.

And a worker paused (SIGSTOP) past its lease while another takes over (PostgreSQL, Kafka,
Redis): when it wakes, its finished result is refused by the fencing token."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from aigc_hub.cache.redis import RedisCache
from aigc_hub.pipelines.vistack.handlers.transcode import BEFORE_PUBLISH
from aigc_hub.store.tables import audit_log
from tests.conftest import kafka_or_skip
from tests.support.hubs import make_broker, wait_until
from tests.support.redis_dbs import private_redis_url
from tests.support.vistack import (
    make_clip,
    process_state,
    running_transcoder,
    upload_video,
    video_moves,
    video_row,
    vistack_stack,
    worker_env,
)
from tests.support.workers import worker_process

GROUP = "vistack-consumer-group"


async def _audited(hub: Any, action: str) -> list[dict[str, Any]]:
    async with hub.engine.connect() as conn:
        rows = await conn.execute(sa.select(audit_log).where(audit_log.c.action == action))
        return [dict(r) for r in rows.mappings()]


def _stop(proc: Any) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(30)


async def test_a_worker_killed_mid_transcode_is_requeued_by_the_watchdog_and_published_once(
    sqlite_url: str, tmp_path: Path
) -> None:
    redis_url = private_redis_url("scale-hub")
    # The lease outlives the killed worker's group membership (6 s on the embedded log), so
    # the survivor finds the redelivered record's video still leased and leaves it: the
    # watchdog is what brings it back, once the lease has run out.
    settings = {
        "lease_s": 15,
        "processing_timeout_s": 1,
        "watchdog_interval_s": 0.5,
        "dispatch_interval_s": 0.5,
    }
    clip = make_clip(tmp_path / "long.mp4", seconds=20.0, size="640x360")
    log = tmp_path / "worker.log"
    async with (
        running_transcoder(tmp_path) as transcoder,
        vistack_stack(
            sqlite_url,
            make_broker("embedded", tmp_path),
            tmp_path,
            blobs=transcoder.store,
            cache=RedisCache.from_url(redis_url),
            groups=[],  # the API and the scanners here; the transcodes in worker processes
            scan=True,
            hub_options={"scanner_lease_ttl_ms": 900},
            transcoder_address=transcoder.address,
            **settings,
        ) as stack,
    ):
        env = worker_env(
            sqlite_url,
            tmp_path,
            transcoder.blob_root,
            transcoder.blob_secret,
            transcoder_address=transcoder.address,
            **settings,
        ) | {
            "AIGC_HUB_BROKER": "embedded",
            "AIGC_HUB_LOG_PATH": str(tmp_path / "log.db"),
            "AIGC_HUB_REDIS_URL": redis_url,
        }
        hub = stack.hub
        key = await stack.tenant("site")
        async with stack.client(key) as client:
            doomed = worker_process(GROUP, env, log)
            try:
                video_id = (await upload_video(client, clip, "long"))["video_id"]

                async def transcoding() -> bool:
                    return (await video_row(hub, video_id))["stage"] == "transcoding"

                await wait_until(transcoding, timeout=120)
                doomed.send_signal(signal.SIGKILL)
                assert await asyncio.to_thread(doomed.wait, 30) == -signal.SIGKILL
            finally:
                _stop(doomed)
            assert (await video_row(hub, video_id))["status"] == "processing"
            survivor = worker_process(GROUP, env, log)
            try:

                async def published() -> bool:
                    return (await video_row(hub, video_id))["status"] == "published"

                await wait_until(published, timeout=180)
            finally:
                survivor.send_signal(signal.SIGTERM)
                await asyncio.to_thread(survivor.wait, 60)
        requeued = await _audited(hub, "scan.vistack-watchdog")
        assert [a["result"] for a in requeued if a["target"] == video_id] == ["requeued_processing"]
        moves = await video_moves(hub, video_id)
        assert moves.count("published") == 1
        assert moves[-3:] == ["pending", "processing", "published"]
        assert transcoder.calls == 2  # the killed run and the one that published
        row = await video_row(hub, video_id)
        assert row["attempts"] == 2


@pytest.mark.postgres
@pytest.mark.kafka
@pytest.mark.redis
async def test_a_worker_paused_past_its_lease_has_its_late_result_refused_by_the_fencing_token(
    pg_url: str, tmp_path: Path
) -> None:
    redis_url = private_redis_url("scale-hub")
    settings = {
        "lease_s": 3,
        "processing_timeout_s": 1,
        "watchdog_interval_s": 0.5,
        "dispatch_interval_s": 0.5,
    }
    clip = make_clip(tmp_path / "clip.mp4", seconds=2.0)
    log = tmp_path / "worker.log"
    # A Kafka of this test's own: the group's offsets are this test's alone.
    with kafka_or_skip() as kafka:
        async with (
            running_transcoder(tmp_path) as transcoder,
            vistack_stack(
                pg_url,
                kafka.broker(),
                tmp_path,
                blobs=transcoder.store,
                cache=RedisCache.from_url(redis_url),
                groups=[],
                scan=True,
                hub_options={"scanner_lease_ttl_ms": 900},
                transcoder_address=transcoder.address,
                **settings,
            ) as stack,
        ):
            env = worker_env(
                pg_url,
                tmp_path,
                transcoder.blob_root,
                transcoder.blob_secret,
                transcoder_address=transcoder.address,
                **settings,
            ) | {
                "AIGC_HUB_BROKER": "kafka",
                "AIGC_HUB_KAFKA_BOOTSTRAP": kafka.bootstrap,
                "AIGC_HUB_KAFKA_CONSUMER_CONFIG": _pairs(kafka.consumer_settings),
                "AIGC_HUB_KAFKA_PRODUCER_CONFIG": _pairs(kafka.producer_settings),
                "AIGC_HUB_REDIS_URL": redis_url,
            }
            hub = stack.hub
            key = await stack.tenant("site")
            async with stack.client(key) as client:
                paused = worker_process(
                    GROUP, env | {"AIGC_HUB_FAILPOINTS": f"{BEFORE_PUBLISH}=stop"}, log
                )
                other = None
                try:
                    video_id = (await upload_video(client, clip, "contested"))["video_id"]

                    async def stopped() -> bool:
                        return process_state(paused.pid) == "T"

                    await wait_until(stopped, timeout=120)
                    first = await video_row(hub, video_id)
                    assert first["status"] == "processing"
                    other = worker_process(GROUP, env, log)

                    async def published() -> bool:
                        return (await video_row(hub, video_id))["status"] == "published"

                    await wait_until(published, timeout=180)
                    winner = await video_row(hub, video_id)
                    assert winner["fencing_token"] > first["fencing_token"]
                    os.kill(paused.pid, signal.SIGCONT)

                    async def refused() -> bool:
                        return bool(await _audited(hub, "vistack.transcode.fenced_out"))

                    await wait_until(refused, timeout=60)
                finally:
                    for proc in (paused, other):
                        if proc is not None and proc.poll() is None:
                            os.kill(proc.pid, signal.SIGCONT)
                            proc.send_signal(signal.SIGTERM)
                            await asyncio.to_thread(proc.wait, 60)
            [fenced] = await _audited(hub, "vistack.transcode.fenced_out")
            assert fenced["target"] == video_id
            assert fenced["detail"]["token"] == first["fencing_token"]
            assert fenced["detail"]["newer"] == winner["fencing_token"]
            after = await video_row(hub, video_id)
            # The late result changed nothing: the winner's manifest, published once.
            assert after["manifest_key"] == winner["manifest_key"]
            assert str(winner["fencing_token"]) in after["manifest_key"]
            assert (await video_moves(hub, video_id)).count("published") == 1
            assert transcoder.calls == 2


def _pairs(settings: object) -> str:
    return ",".join(f"{k}={v}" for k, v in dict(settings).items())  # type: ignore[call-overload]
