"""The media stage on real parts: SQLite/PostgreSQL, the embedded log, the local provider
rendering with FFmpeg, the media toolkit's FFmpeg runs and the local moderation.

A finished provider job goes OUTPUT_FETCHING → POST_PROCESSING → SUCCEEDED only once every
required variant exists; a redelivered media job makes nothing twice; a black output fails
with failure class ``moderation`` and its hold released; moderation being down is retried;
a full scratch disk pauses the media group; the urgent queue takes expiring outputs; the
orphan scanner's commands delete orphan objects and mark rows whose object is gone.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from aigc_hub.core.errors import RetryableError
from aigc_hub.media import ladder, tools
from aigc_hub.moderation import Verdict
from aigc_hub.observability import metrics
from aigc_hub.pipelines.generation import events
from aigc_hub.pipelines.generation.media_scanners import OrphanScanner
from aigc_hub.pipelines.generation.models import (
    assets,
    credit_ledger,
    generation_tasks,
    task_events,
)
from aigc_hub.reliability.scanners import Finding
from aigc_hub.store import tables
from tests.support.generation import MEDIA_STAGE, Stack, generation_stack
from tests.support.hubs import make_broker, wait_until
from tests.support.moderation import ScriptedModeration
from tests.support.provider import ProviderServer, provider_server, require_ffmpeg

PROFILES = {"proxy", "hls", "poster", "thumbnails", "waveform"}

pytestmark = pytest.mark.filterwarnings(
    "ignore:Exception ignored in. <socket.socket:pytest.PytestUnraisableExceptionWarning"
)


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[ProviderServer]:
    require_ffmpeg()
    data = tmp_path / "provider"
    data.mkdir()
    with provider_server(data) as server:
        yield server


async def submit(client: httpx.AsyncClient, prompt: str = "a paper boat on a rainy street") -> str:
    body = {"model": "local-v1", "prompt": prompt, "duration_s": 2, "resolution": "320x180"}
    response = await client.post(
        "/v1/generation-tasks", json=body, headers={"Idempotency-Key": str(uuid.uuid4())}
    )
    assert response.status_code == 201, response.text
    return str(response.json()["task_id"])


async def wait_status(
    client: httpx.AsyncClient, task_id: str, wanted: set[str], timeout: float = 120
) -> dict[str, Any]:
    found: dict[str, Any] = {}

    async def reached() -> bool:
        found.update((await client.get(f"/v1/generation-tasks/{task_id}")).json())
        return found.get("status") in wanted

    await wait_until(reached, timeout=timeout)
    return found


async def generate_one(stack: Stack) -> dict[str, Any]:
    """One task of a new tenant, run to its end; its snapshot."""
    key = await stack.tenant("acme")
    async with stack.client(key) as client:
        task_id = await submit(client)
        return await wait_status(client, task_id, {"SUCCEEDED", "FAILED"})


async def rows_of(stack: Stack, query: sa.Select[Any]) -> Sequence[sa.Row[Any]]:
    async with stack.hub.engine.connect() as conn:
        return (await conn.execute(query)).all()


async def variants_of(stack: Stack, source_id: str) -> Sequence[sa.Row[Any]]:
    return await rows_of(stack, sa.select(assets).where(assets.c.source_asset_id == source_id))


async def ledger_of(stack: Stack, task_id: str) -> list[str]:
    rows = await rows_of(
        stack,
        sa.select(credit_ledger.c.type)
        .where(credit_ledger.c.task_id == task_id)
        .order_by(credit_ledger.c.id),
    )
    return [r.type for r in rows]


def probe_streams(path: Path) -> list[dict[str, Any]]:
    """Every stream ffprobe reads in ``path`` (an HLS playlist follows its local URIs)."""
    done = subprocess.run(
        [tools.executable("ffprobe"), "-v", "error", "-show_streams", "-of", "json", str(path)],
        capture_output=True,
        check=True,
        timeout=60,
    )
    streams: list[dict[str, Any]] = json.loads(done.stdout)["streams"]
    return streams


async def test_a_task_is_succeeded_only_with_every_variant_and_its_hls_plays(
    db_url: str, tmp_path: Path, provider: ProviderServer
) -> None:
    broker = make_broker("embedded", tmp_path)
    async with generation_stack(db_url, broker, provider, tmp_path, **MEDIA_STAGE) as stack:
        task = await generate_one(stack)
        task_id = task["task_id"]
        assert task["status"] == "SUCCEEDED", task
        moves = await rows_of(
            stack,
            sa.select(task_events.c.to_status)
            .where(task_events.c.task_id == task_id)
            .order_by(task_events.c.id),
        )
        path = [r.to_status for r in moves]
        assert path[-3:] == ["OUTPUT_FETCHING", "POST_PROCESSING", "SUCCEEDED"]
        source_id = str(task["result_asset_ids"][0])
        variants = await variants_of(stack, source_id)
        assert {v.variant_profile for v in variants} == PROFILES
        assert {(v.status, v.pipeline_version, v.kind) for v in variants} == {
            ("READY", ladder.PIPELINE_VERSION, "variant")
        }
        assert await ledger_of(stack, task_id) == ["RESERVE", "SETTLE"]
        decisions = await rows_of(
            stack,
            sa.select(tables.moderation_decisions).where(
                tables.moderation_decisions.c.subject_id == source_id
            ),
        )
        assert [(d.stage, d.verdict) for d in decisions] == [("output", "allow")]

    # ffprobe reads the master playlist and each rendition from the stored objects.
    objects = tmp_path / "blobs" / "objects"
    hls = next(v for v in variants if v.variant_profile == "hls")
    master = objects / hls.object_key
    text = master.read_text()
    renditions = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert len(renditions) >= 2, text
    assert {s["codec_type"] for s in probe_streams(master)} >= {"video"}
    for rendition in renditions:
        streams = probe_streams(master.parent / rendition)
        assert any(s["codec_type"] == "video" and s["codec_name"] == "h264" for s in streams)
    proxy = next(v for v in variants if v.variant_profile == "proxy")
    assert probe_streams(objects / proxy.object_key)[0]["codec_name"] == "h264"


async def test_a_redelivered_media_job_makes_no_second_variant(
    db_url: str, tmp_path: Path, provider: ProviderServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[str] = []
    real_make = ladder.make_variant

    async def counting(profile: str, *args: Any, **kwargs: Any) -> ladder.VariantFiles:
        made.append(profile)
        return await real_make(profile, *args, **kwargs)

    monkeypatch.setattr(ladder, "make_variant", counting)
    broker = make_broker("embedded", tmp_path)
    async with generation_stack(db_url, broker, provider, tmp_path, **MEDIA_STAGE) as stack:
        failures = 0

        def fail_once() -> None:
            nonlocal failures
            failures += 1
            if failures == 1:  # after every variant is made, before the task's end commits
                raise RetryableError("lost the database between the variants and the end")

        stack.hub.failpoints.arm("media.before_finish", fail_once)
        task = await generate_one(stack)
        task_id = task["task_id"]
        assert task["status"] == "SUCCEEDED", task
        source_id = str(task["result_asset_ids"][0])
        first = {v.variant_profile: v.id for v in await variants_of(stack, source_id)}

        # What the POST_PROCESSING watchdog sends: a new event for the same job.
        again = events.MediaProcessRequested(task_id=task_id, source_asset_id=source_id)
        async with stack.hub.transaction() as conn:
            envelope = events_envelope(again, task_id)
            await stack.hub.outbox.add(conn, [envelope])
        await wait_until(lambda: _handled(stack, envelope.event_id), timeout=30)
        assert failures == 2  # the job ran twice
        assert sorted(made) == sorted(PROFILES)  # …and made each variant once
        after = {v.variant_profile: v.id for v in await variants_of(stack, source_id)}
        assert after == first and set(after) == PROFILES


def events_envelope(payload: events.MediaProcessRequested, task_id: str) -> Any:
    from aigc_hub.core.envelope import Envelope

    return Envelope.new(
        events.MEDIA_PROCESS_REQUESTED, payload.model_dump(), key=task_id, source="test"
    )


async def _handled(stack: Stack, event_id: str) -> bool:
    rows = await rows_of(
        stack,
        sa.select(tables.inbox.c.event_id).where(
            tables.inbox.c.event_id == event_id, tables.inbox.c.consumer == "generation-media"
        ),
    )
    return bool(rows)


async def test_a_black_output_fails_with_class_moderation_and_its_hold_is_released(
    db_url: str, tmp_path: Path, provider: ProviderServer
) -> None:
    provider.faults(black_next=1)
    broker = make_broker("embedded", tmp_path)
    async with generation_stack(db_url, broker, provider, tmp_path, **MEDIA_STAGE) as stack:
        task = await generate_one(stack)
        task_id = task["task_id"]
        assert (task["status"], task["failure_class"]) == ("FAILED", "moderation"), task
        assert await ledger_of(stack, task_id) == ["RESERVE", "RELEASE"]
        decisions = await rows_of(
            stack, sa.select(tables.moderation_decisions).order_by(tables.moderation_decisions.c.id)
        )
        assert [(d.stage, d.verdict) for d in decisions] == [
            ("input", "allow"),
            ("output", "reject"),
        ]
        assert "frames.black" in decisions[1].hit_rules and decisions[1].policy_version


async def test_moderation_down_is_retried_until_it_answers(
    db_url: str, tmp_path: Path, provider: ProviderServer
) -> None:
    broker = make_broker("embedded", tmp_path)
    async with generation_stack(db_url, broker, provider, tmp_path, **MEDIA_STAGE) as stack:
        flaky = ScriptedModeration(stack.gen.moderation, frame_failures=2)
        stack.gen.moderation = flaky
        task = await generate_one(stack)
        assert task["status"] == "SUCCEEDED", task
        assert flaky.frame_calls == 3


async def test_a_full_scratch_disk_pauses_the_media_group_until_it_drains(
    db_url: str, tmp_path: Path, provider: ProviderServer
) -> None:
    broker = make_broker("embedded", tmp_path)
    async with generation_stack(
        db_url, broker, provider, tmp_path, media_disk_high_water=0.000001, **MEDIA_STAGE
    ) as stack:
        gauge = metrics.CONSUMER_PAUSED.labels("generation-media")
        key = await stack.tenant("acme")
        async with stack.client(key) as client:
            task_id = await submit(client)
            await wait_status(client, task_id, {"POST_PROCESSING"})

            async def paused() -> bool:
                return bool(gauge._value.get() == 1)

            await wait_until(paused)
            snapshot = (await client.get(f"/v1/generation-tasks/{task_id}")).json()
            assert snapshot["status"] == "POST_PROCESSING"
            stack.gen.settings.media_disk_high_water = 1.0  # the disk drained
            task = await wait_status(client, task_id, {"SUCCEEDED", "FAILED"})
        assert task["status"] == "SUCCEEDED"


async def test_an_output_expiring_soon_is_fetched_on_the_urgent_queue(
    db_url: str, tmp_path: Path, provider: ProviderServer
) -> None:
    broker = make_broker("embedded", tmp_path)
    # The local provider's URLs live an hour: with a two-hour window every one is urgent.
    async with generation_stack(
        db_url, broker, provider, tmp_path, urgent_fetch_within_s=7200, **MEDIA_STAGE
    ) as stack:
        task = await generate_one(stack)
        assert task["status"] == "SUCCEEDED"
        fetches = await rows_of(
            stack,
            sa.select(tables.outbox.c.topic, tables.outbox.c.event_type).where(
                tables.outbox.c.event_type.in_(
                    [events.FETCH_REQUESTED, events.FETCH_URGENT_REQUESTED]
                )
            ),
        )
        assert {(f.topic, f.event_type) for f in fetches} == {
            (events.FETCH_URGENT, events.FETCH_URGENT_REQUESTED)
        }


async def test_orphan_objects_are_deleted_and_rows_without_objects_marked_by_command(
    db_url: str, tmp_path: Path, provider: ProviderServer
) -> None:
    broker = make_broker("embedded", tmp_path)
    async with generation_stack(
        db_url, broker, provider, tmp_path, orphan_grace_s=0, **MEDIA_STAGE
    ) as stack:
        blobs = stack.hub.blobs
        assert blobs is not None
        task = await generate_one(stack)
        assert task["status"] == "SUCCEEDED"
        orphan = f"tenants/acme/generation/{uuid.uuid4()}/a1/output.mp4"
        await blobs.put(orphan, b"left behind by a fetch whose row never committed")
        poster = next(
            v
            for v in await variants_of(stack, str(task["result_asset_ids"][0]))
            if v.variant_profile == "poster"
        )
        await blobs.delete(poster.object_key)

        scanner = OrphanScanner(stack.gen)
        now = stack.hub.clock.now_ms() + 1
        found = await scanner.find(now)
        assert {(f.target, f.detail["kind"]) for f in found} == {
            (orphan, "orphan_object"),
            (poster.id, "missing_object"),
        }
        results = {f.target: await scanner.repair(Finding(f.target, f.detail), now) for f in found}
        assert results == {
            orphan: "orphan_delete_requested",
            poster.id: "missing_object_reported",
        }

        async def carried_out() -> bool:
            gone = await blobs.head(orphan) is None
            row = await rows_of(stack, sa.select(assets.c.status).where(assets.c.id == poster.id))
            return gone and row[0].status == "MISSING"

        await wait_until(carried_out, timeout=30)
        # Everything that is still stored has its row: the next pass finds nothing.
        assert await OrphanScanner(stack.gen).find(stack.hub.clock.now_ms() + 1) == []


async def test_output_sent_to_human_review_is_held_unplayable_with_no_watchdog(
    db_url: str, tmp_path: Path, provider: ProviderServer
) -> None:
    broker = make_broker("embedded", tmp_path)
    async with generation_stack(db_url, broker, provider, tmp_path, **MEDIA_STAGE) as stack:
        # every output goes to a person (as a policy that wants faces looked at might)
        stack.gen.moderation = ScriptedModeration(
            stack.gen.moderation, frame_verdict=Verdict.HUMAN_REVIEW, frame_rules=("faces",)
        )
        key = await stack.tenant("acme")
        async with stack.client(key) as client:
            task_id = await submit(client)
            await wait_status(client, task_id, {"POST_PROCESSING"})

            async def decided() -> bool:
                decisions = tables.moderation_decisions
                query = sa.select(decisions).where(decisions.c.stage == "output")
                return bool(await rows_of(stack, query))

            await wait_until(decided, timeout=60)
            task = (await client.get(f"/v1/generation-tasks/{task_id}")).json()
        assert task["status"] == "POST_PROCESSING"
        row = (
            await rows_of(
                stack,
                sa.select(generation_tasks.c.deadline_at, generation_tasks.c.result_asset_id).where(
                    generation_tasks.c.id == task_id
                ),
            )
        )[0]
        assert row.deadline_at is None
        source = await rows_of(stack, sa.select(assets).where(assets.c.id == row.result_asset_id))
        assert source[0].moderation_verdict == "human_review"
        assert await variants_of(stack, row.result_asset_id) == []
        assert await ledger_of(stack, task_id) == ["RESERVE"]  # still held
