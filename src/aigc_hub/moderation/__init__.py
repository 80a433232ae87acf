"""Moderation of prompts and outputs, shared by every pipeline (seed 004 §3.3.3-13, §3.8.4).

- ``base``          Verdict, Decision, ModerationUnavailable, the Moderation protocol
- ``normalize``     text normalisation against trivial evasions; the evidence digest
- ``policy``        the versioned rule set (``policies/*.toml``): keyword, regex, semantic
- ``semantic``      all-MiniLM-L6-v2 embeddings against rule exemplars (``ml`` extra)
- ``frame_checks``  black, frozen and wrong-length output, without a model
- ``local``         LocalModeration: all of the above
- ``decisions``     ``record``: one appended ``moderation_decisions`` row per review
- ``settings``      ModerationSettings (``AIGC_HUB_MODERATION_*``)
- ``factory``       ``make_moderation``: settings → adapter
"""

from __future__ import annotations

from aigc_hub.moderation.base import (
    Decision,
    Moderation,
    ModerationUnavailable,
    Verdict,
    strictest,
)
from aigc_hub.moderation.decisions import record
from aigc_hub.moderation.factory import make_moderation
from aigc_hub.moderation.local import LocalModeration
from aigc_hub.moderation.policy import Policy, load_policy
from aigc_hub.moderation.settings import ModerationSettings

__all__ = [
    "Decision",
    "LocalModeration",
    "Moderation",
    "ModerationSettings",
    "ModerationUnavailable",
    "Policy",
    "Verdict",
    "load_policy",
    "make_moderation",
    "record",
    "strictest",
]
