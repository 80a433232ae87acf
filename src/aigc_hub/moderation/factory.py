"""Settings → a moderation adapter (the one place that chooses among them)."""

from __future__ import annotations

from aigc_hub.core import failpoints as fp
from aigc_hub.moderation.base import Moderation
from aigc_hub.moderation.local import LocalModeration
from aigc_hub.moderation.settings import ModerationSettings


def make_moderation(
    settings: ModerationSettings | None = None, *, failpoints: fp.Failpoints = fp.NONE
) -> Moderation:
    """The adapter ``settings.adapter`` names (``local``: :class:`LocalModeration`).

    Reads the policy file now (``ConfigurationError`` if it is invalid); the semantic model
    loads later, on the first review or ``warm_up()``.
    """
    settings = settings or ModerationSettings()
    # One adapter today; another (a vendor's API) is one more branch here.
    return LocalModeration(settings, failpoints=failpoints)
