"""The pipeline's settings; each has an ``AIGC_HUB_MEMO_`` environment twin."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class MemoSettings(BaseSettings):
    """How soon stamped notes are archived, and how often the archiver looks."""

    model_config = SettingsConfigDict(env_prefix="AIGC_HUB_MEMO_", extra="ignore")

    archive_after_s: float = Field(3600.0, ge=0, description="stamped notes older are archived")
    scan_every_s: float = Field(30.0, gt=0, description="how often the archiver looks")
