"""``generation.export.rendered`` on ``media.process``: the media worker makes an export's
playback variants (``render_variants``: proxy, HLS, poster by default) with the same ladder,
job keys and checkpoints as a generated output's (:func:`.media_variants.make`), then ends
the export ``succeeded``; its asset then plays like any other (HLS first).

A redelivery finds the variants made and makes only the missing ones. An export cancelled
meanwhile is left alone (its file stays an asset of the project). A rendered file the media
toolkit refuses fails the export with the reason: the render made it, retrying cannot help.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.blobs.base import download
from aigc_hub.core.envelope import Envelope
from aigc_hub.media.probe import probe
from aigc_hub.media.sandbox import MediaRefused, scratch_dir
from aigc_hub.pipelines.generation import assets as asset_service
from aigc_hub.pipelines.generation import events, exports
from aigc_hub.pipelines.generation.exports import ExportStatus
from aigc_hub.pipelines.generation.handlers.media_variants import made_profiles, make
from aigc_hub.pipelines.generation.state import Generation
from aigc_hub.reliability.outbox import Routed
from aigc_hub.runtime.context import HandlerContext
from aigc_hub.store.engine import reader


async def process_export(gen: Generation, env: Envelope, ctx: HandlerContext) -> list[Envelope]:
    """Make the rendered export's missing playback variants, then end it (see the module)."""
    rendered = ctx.payload_as(events.ExportRendered)
    async with reader(gen.hub.engine) as conn:
        job = await exports.load_job(conn, rendered.job_id)
        source = await asset_service.load(conn, rendered.asset_id)
        made = await made_profiles(conn, rendered.asset_id)
    if (
        job is None
        or source is None
        or job["status"] != ExportStatus.RUNNING
        or job["asset_id"] != rendered.asset_id
        or source["tenant_id"] != job["tenant_id"]  # never trust an event's tenant
    ):
        return []
    if gen.hub.blobs is None:
        raise RuntimeError("the hub has no blob store: exports cannot be processed")
    missing = [p for p in gen.settings.render_variant_list() if p not in made]
    if missing:
        async with scratch_dir(gen.scratch_root()) as scratch:
            local = scratch / "export.mp4"
            await download(gen.hub.blobs, str(source["object_key"]), local)
            try:
                info = await probe(local, gen.media_limits())
                for profile in missing:
                    await make(gen, ctx, None, source, profile, local, info, scratch)
            except MediaRefused as refused:
                _end(gen, ctx, job, ExportStatus.FAILED, f"variants: {refused.code}: {refused}")
                return []
    _end(gen, ctx, job, ExportStatus.SUCCEEDED, None)
    return []


def _end(
    gen: Generation,
    ctx: HandlerContext,
    job: Mapping[str, Any],
    status: ExportStatus,
    reason: str | None,
) -> None:
    """End the export (if still running) in the handler's commit, with its notification."""
    now = gen.hub.clock.now_ms()
    job_id = str(job["id"])

    async def record(conn: AsyncConnection) -> list[Envelope | Routed]:
        note = await exports.move_job(
            conn,
            job_id,
            while_in=(ExportStatus.RUNNING,),
            now=now,
            status=status,
            status_reason=None if reason is None else reason[:300],
            current_node=None,
        )
        return [] if note is None else [note]

    ctx.write(record)
