"""Output fetch: download a finished job's result into our storage (seed 004 §3.6.5).

The URL comes from the archived webhook that reported the success when it has a while to
live (read from the archive, never copied into business rows or events); otherwise, or when
that download fails, a status query right before downloading gives a fresh one. The object
key is deterministic per attempt, so a repeated fetch overwrites the same object instead of
making a second one. A probed, valid MP4 is stored (streamed, never whole in memory) as the
task's source asset, and the task moves OUTPUT_FETCHING → POST_PROCESSING with a
``media.process`` request in the same transaction: the media worker makes its variants
(``handlers/media_variants.py``). ``generation-fetcher-urgent`` runs the same handler on the
urgent queue, for outputs whose URL expires soon.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.blobs.base import file_chunks
from aigc_hub.core import ids
from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import Retry
from aigc_hub.media.probe import InvalidMedia
from aigc_hub.pipelines.generation import events, records
from aigc_hub.pipelines.generation.adapters.base import (
    FetchedFile,
    NormalizedStatus,
    OutputAsset,
    ProviderAdapter,
    ProviderError,
)
from aigc_hub.pipelines.generation.models import assets, callback_events
from aigc_hub.pipelines.generation.state import Generation
from aigc_hub.pipelines.generation.states import TaskStatus
from aigc_hub.reliability.outbox import Routed
from aigc_hub.runtime.context import HandlerContext
from aigc_hub.store.dialects import dialect_of
from aigc_hub.store.engine import reader

if TYPE_CHECKING:
    from aigc_hub.bootstrap import Hub

BUCKET = "hub"
#: An archived output URL is used only while it has at least this long to live.
FRESH_FOR_MS = 60_000


def object_key(tenant_id: str, task_id: str, attempt_id: str) -> str:
    return f"tenants/{tenant_id}/generation/{task_id}/{attempt_id}/output.mp4"


async def fetch_output(gen: Generation, env: Envelope, ctx: HandlerContext) -> list[Envelope]:
    hub = gen.hub
    f = ctx.payload_as(events.FetchRequested)
    async with reader(hub.engine) as conn:
        task = await records.load(conn, f.task_id)
        job = await records.load_job(conn, f.attempt_id)
    if (
        task is None
        or job is None
        or task["status"] != TaskStatus.OUTPUT_FETCHING.value
        or task["current_attempt_id"] != f.attempt_id
    ):
        return []
    if hub.blobs is None:
        raise RuntimeError("the hub has no blob store: outputs cannot be kept")
    adapter = gen.providers.get(job.provider)
    try:
        with tempfile.TemporaryDirectory(prefix="aigc-fetch-") as tmp:
            dest = Path(tmp) / "output.mp4"
            fetched = await _download(gen, adapter, job, f.callback_id, dest)
            try:
                info = await gen.probe(fetched.path)
            except InvalidMedia as exc:
                _invalid(hub, env, task, str(exc), ctx)
                return []
            key = object_key(task["tenant_id"], task["id"], f.attempt_id)
            stored = await hub.blobs.put(key, file_chunks(fetched.path), "video/mp4")
    except ProviderError as exc:
        # Expired URL, 5xx, not ready: fetch again later (the fetch scanner is the backstop).
        raise Retry(exc.retry_after_s or 5.0) from exc
    asset_id = ids.new_id_str()
    now = hub.clock.now_ms()

    async def record(conn: AsyncConnection) -> list[Envelope | Routed] | None:
        current = await records.load(conn, f.task_id)
        if current is None or current["status"] != TaskStatus.OUTPUT_FETCHING.value:
            return []
        inserted = await conn.execute(
            dialect_of(conn)
            .insert(assets)
            .values(
                id=asset_id,
                tenant_id=current["tenant_id"],
                project_id=current["project_id"],
                kind="generated_video",
                task_id=current["id"],
                object_bucket=BUCKET,
                object_key=key,
                content_type="video/mp4",
                size_bytes=stored.size,
                checksum_algo="sha256",
                checksum_value=stored.sha256,
                status="READY",
                width=info.width,
                height=info.height,
                duration_ms=info.duration_ms,
                frame_rate_num=info.frame_rate_num,
                frame_rate_den=info.frame_rate_den,
                codec=info.codec,
                variant_profile="source",
                created_at=now,
            )
            .on_conflict_do_nothing()
            .returning(assets.c.id)
        )
        found = inserted.scalar_one_or_none()
        if found is None:  # a repeated fetch: the object key's asset is already there
            found = (
                await conn.execute(
                    sa.select(assets.c.id).where(
                        assets.c.object_bucket == BUCKET, assets.c.object_key == key
                    )
                )
            ).scalar_one()
        notes = await records.move(
            conn,
            current,
            TaskStatus.POST_PROCESSING,
            cause="output.fetched",
            cause_env=env,
            now_ms=now,
            values={"result_asset_id": found},
            detail={"asset_id": found, "size_bytes": stored.size, "codec": info.codec},
            deadline_ms=now + int(gen.settings.post_processing_deadline_s * 1000),
        )
        process = env.derive(
            events.MEDIA_PROCESS_REQUESTED,
            events.MediaProcessRequested(task_id=current["id"], source_asset_id=found).model_dump(),
            key=current["id"],
            source="generation.fetcher",
        )
        return [*notes, process]

    ctx.write(record)
    return []


async def _download(
    gen: Generation, adapter: ProviderAdapter, job: Any, callback_id: int | None, dest: Path
) -> FetchedFile:
    """Download the job's first output to ``dest``: from the URL in the archived webhook that
    reported the success when it is still fresh, else (none, stale, or its download failed)
    from the one a new status query gives. Raises ProviderError."""
    archived = await _archived_output(gen, adapter, callback_id)
    if archived is not None:
        try:
            return await adapter.fetch_output(
                archived, dest, max_bytes=gen.settings.max_output_bytes
            )
        except ProviderError:
            pass  # e.g. expired since: ask the provider for a fresh URL
    fresh = await adapter.query(
        provider_job_id=job.provider_job_id, request_key=job.provider_request_key or ""
    )
    if fresh.normalized_status is not NormalizedStatus.SUCCEEDED or not fresh.output_assets:
        raise ProviderError("no output to fetch yet", retry_class=fresh.retry_class)
    return await adapter.fetch_output(
        fresh.output_assets[0], dest, max_bytes=gen.settings.max_output_bytes
    )


async def _archived_output(
    gen: Generation, adapter: ProviderAdapter, callback_id: int | None
) -> OutputAsset | None:
    """The first output named by archived webhook ``callback_id`` if it reported success and
    its URL is not about to expire; None otherwise (the caller asks the provider)."""
    if callback_id is None:
        return None
    async with reader(gen.hub.engine) as conn:
        body = (
            await conn.execute(
                sa.select(callback_events.c.body).where(callback_events.c.id == callback_id)
            )
        ).scalar_one_or_none()
    if body is None:
        return None
    try:
        result = adapter.parse_callback(body, {})
    except ProviderError:
        return None
    if result.normalized_status is not NormalizedStatus.SUCCEEDED or not result.output_assets:
        return None
    asset = result.output_assets[0]
    expires = asset.expires_at_ms
    if expires is not None and expires - gen.hub.clock.now_ms() < FRESH_FOR_MS:
        return None
    return asset


def _invalid(
    hub: Hub, env: Envelope, task: Mapping[str, Any], reason: str, ctx: HandlerContext
) -> None:
    """Stage FAILED (invalid output) for a task still fetching."""
    ctx.write(
        records.failing(
            str(task["id"]),
            while_in=TaskStatus.OUTPUT_FETCHING,
            cause="output.invalid",
            cause_env=env,
            now_ms=hub.clock.now_ms(),
            failure_class="invalid_output",
            failure_code="unreadable_video",
            detail={"reason": reason[:300]},
        )
    )


async def on_fetch(gen: Generation, env: Envelope, ctx: HandlerContext) -> list[Envelope]:
    """``generation-fetcher``: download one finished job's output (:func:`fetch_output`)."""
    return await fetch_output(gen, env, ctx)
