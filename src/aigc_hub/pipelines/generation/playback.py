"""STAND-IN for branch i12-assets's module (issue 12 contract §4): the signature only.

Dropped when i12-assets is merged; it grants nothing (every asset is "not found").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from aigc_hub.core.errors import NotFound

if TYPE_CHECKING:
    from aigc_hub.pipelines.generation.state import Generation


@dataclass(frozen=True)
class PlaybackGrant:
    """What a player opens, until when, and its content type."""

    url: str
    expires_at: int
    content_type: str


async def playback_grant(
    gen: Generation, *, tenant_id: str, asset_id: str, expires_s: int = 600
) -> PlaybackGrant:
    """Stand-in: refuses every asset until i12-assets provides the real grant."""
    raise NotFound(f"asset {asset_id} has no playback yet")
