"""``generation-media``: the media worker's consumer group on ``media.process`` (seed 004
§3.3.3-9), its own concurrency pool, paused while its scratch disk is past the high-water
mark. Each event type has its module: a tenant's upload verified and probed
(:mod:`.asset_probe`), a fetched output's variants and review (:mod:`.media_variants`), a
rendered export's playback variants (:mod:`.export_variants`)."""

from __future__ import annotations

from aigc_hub.core.envelope import Envelope
from aigc_hub.pipelines.generation import events
from aigc_hub.pipelines.generation.handlers import asset_probe, export_variants, media_variants
from aigc_hub.pipelines.generation.state import Generation
from aigc_hub.runtime.context import HandlerContext


async def on_media(gen: Generation, env: Envelope, ctx: HandlerContext) -> list[Envelope]:
    """Route one ``media.process`` event to the module that handles its type."""
    if env.event_type == events.MEDIA_PROCESS_REQUESTED:
        return await media_variants.process_output(gen, env, ctx)
    if env.event_type == events.ASSET_UPLOADED:
        return await asset_probe.on_uploaded(gen, env, ctx)
    if env.event_type == events.EXPORT_RENDERED:
        return await export_variants.process_export(gen, env, ctx)
    return []
