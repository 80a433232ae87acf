"""``asset.uploaded`` → verify and probe the upload → ``READY`` or ``REJECTED`` (seed 004
§3.4 steps 5–6, §3.6.1).

The object is streamed into a scratch directory of its own (never held in memory), its
sha256 computed on the way: S3 keeps no whole-object sha256 after a multipart upload, so
this is where the declared checksum is verified. Then the media probe reads the file.
(``aigc_hub.media.probe``: whitelists, and every limit checked before anything decodes).
Everything outside happens before the one short transaction that records the outcome, a
guarded ``PROCESSING → …`` move: a redelivery finds the asset moved on and does nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.blobs.base import BlobNotFound, ObjectTooLarge, download
from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import PermanentError
from aigc_hub.media import probe, sandbox
from aigc_hub.pipelines.generation import assets, events
from aigc_hub.pipelines.generation.assets import AssetStatus
from aigc_hub.pipelines.generation.state import Generation
from aigc_hub.reliability.outbox import Routed
from aigc_hub.runtime.context import HandlerContext


class Rejected(PermanentError):
    """The upload is refused; ``reason`` goes to the row's ``status_reason``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


async def _copy(gen: Generation, row: dict[str, Any], dest: Path) -> None:
    """Stream the object to ``dest`` checking its size and sha256 against the declared ones."""
    declared = int(row["size_bytes"])
    try:
        got = await download(assets.store_of(gen), row["object_key"], dest, max_bytes=declared)
    except BlobNotFound:
        raise Rejected("object_missing: the uploaded object is gone") from None
    except ObjectTooLarge:  # stopped reading: more bytes than declared cannot pass
        raise Rejected(f"size_mismatch: more than the {declared} bytes declared") from None
    if got.size != declared:
        raise Rejected(f"size_mismatch: {got.size} bytes, {declared} declared")
    if got.sha256 != row["checksum_value"]:
        raise Rejected("checksum_mismatch")


async def _probe(gen: Generation, path: Path, scratch: Path) -> dict[str, Any]:
    """The facts the row records; Rejected when the media toolkit refuses the file (format,
    codec, limits checked before anything decodes, unreadable…)."""
    limits = sandbox.MediaLimits(max_bytes=gen.settings.asset_max_bytes)
    try:
        info = await probe.probe(path, limits, scratch_root=scratch)
    except sandbox.MediaRefused as exc:
        raise Rejected(f"{exc.code}: {exc}") from None
    return {
        "width": info.width,
        "height": info.height,
        "duration_ms": info.duration_ms,
        "frame_rate_num": info.frame_rate_num,
        "frame_rate_den": info.frame_rate_den,
        "codec": info.video_codec,
        "audio_codec": info.audio_codec,
    }


async def probe_upload(gen: Generation, env: Envelope, ctx: HandlerContext) -> list[Envelope]:
    """Verify and probe one completed upload; stages READY (with the probe's facts) or
    REJECTED (with the reason). An asset not PROCESSING any more is left alone."""
    uploaded = ctx.payload_as(events.AssetUploaded)
    async with ctx.read() as conn:
        row = await assets.load(conn, uploaded.asset_id)
    if row is None or row["status"] != AssetStatus.PROCESSING:
        return []
    to: AssetStatus = AssetStatus.READY
    values: dict[str, Any] = {"status_reason": None}
    async with sandbox.scratch_dir() as scratch:
        try:
            path = scratch / "source"
            await _copy(gen, row, path)
            values |= await _probe(gen, path, scratch)
        except Rejected as exc:
            to, values = AssetStatus.REJECTED, {"status_reason": exc.reason[:300]}
    now = gen.hub.clock.now_ms()

    async def record(conn: AsyncConnection) -> list[Envelope | Routed]:
        await assets.move(conn, row["id"], AssetStatus.PROCESSING, to, now_ms=now, values=values)
        return []

    ctx.write(record)
    return []


async def on_uploaded(gen: Generation, env: Envelope, ctx: HandlerContext) -> list[Envelope]:
    """``generation-media`` on ``media.process``: ``asset.uploaded`` → :func:`probe_upload`;
    other event types on the topic are not this handler's (the media worker's)."""
    if env.event_type != events.ASSET_UPLOADED:
        return []
    return await probe_upload(gen, env, ctx)
