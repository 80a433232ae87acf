"""``generation-media``: the media worker's consumer group on ``media.process`` (seed 004
§3.3.3-9), its own concurrency pool, paused while its scratch disk is past the high-water
mark. Each event type has its module: output variants (``media_variants``)."""

from __future__ import annotations

from aigc_hub.core.envelope import Envelope
from aigc_hub.pipelines.generation import events
from aigc_hub.pipelines.generation.handlers import media_variants
from aigc_hub.pipelines.generation.state import Generation
from aigc_hub.runtime.context import HandlerContext


async def on_media(gen: Generation, env: Envelope, ctx: HandlerContext) -> list[Envelope]:
    """Route one ``media.process`` event to the module that handles its type."""
    if env.event_type == events.MEDIA_PROCESS_REQUESTED:
        return await media_variants.process_output(gen, env, ctx)
    return []
