"""Settings of the transcoder service; each has an ``AIGC_HUB_VISTACK_TRANSCODER_`` twin."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class TranscoderSettings(BaseSettings):
    """Where the transcoder listens, how many videos it transcodes at once, its limits."""

    model_config = SettingsConfigDict(
        env_prefix="AIGC_HUB_VISTACK_TRANSCODER_", extra="ignore", hide_input_in_errors=True
    )

    listen: str = Field(
        "127.0.0.1:50051", description="host:port the gRPC service listens on (port 0: any)"
    )
    concurrency: int = Field(2, ge=1, le=64, description="videos transcoded at once")
    queue: int = Field(
        8, ge=0, le=1000, description="calls that may wait for a slot; more: RESOURCE_EXHAUSTED"
    )
    metrics_port: int = Field(
        0, ge=0, le=65535, description="serve Prometheus /metrics on 127.0.0.1:PORT; 0 = none"
    )
    timeout_s: float = Field(
        3600.0, gt=0, description="longest one FFmpeg run may take (the media sandbox's limit)"
    )
    max_source_bytes: int = Field(
        2 << 30, ge=1024, description="largest source the transcoder downloads"
    )
