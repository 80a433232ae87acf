"""Settings of the vistack pipeline; each has an ``AIGC_HUB_VISTACK_`` environment twin.

The seed's ``[kafka]`` section keeps its names: ``AIGC_HUB_VISTACK_KAFKA_BROKERS``,
``_GROUP_ID`` (default ``vistack-consumer-group``) and ``_CONCURRENCY`` (default 4). The
retry, lease and watchdog numbers are the seed's (§ retry dispatcher, watchdog, idempotency
triple); tests shorten them.
"""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "AIGC_HUB_VISTACK_"


class VistackSettings(BaseSettings):
    """The seed's ``[kafka]`` settings, the transcoder's address, the retry path's numbers,
    upload limits and the danmaku and comment limits."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="ignore", hide_input_in_errors=True
    )

    kafka_brokers: str = Field(
        "",
        description="the seed's [kafka].brokers: Kafka bootstrap servers; empty = the hub's "
        "own broker (AIGC_HUB_BROKER). Set, it must name the hub's Kafka (one backbone)",
    )
    group_id: str = Field(
        "vistack-consumer-group",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$",
        description="the seed's [kafka].group_id: the consumer group of the transcode, "
        "delete_file and comment topics (danmaku's batch writers are `<group_id>-danmaku`)",
    )
    concurrency: int = Field(
        4,
        ge=1,
        le=64,
        description="the seed's [kafka].concurrency: records in work at once per worker process",
    )
    transcoder_address: str = Field(
        "127.0.0.1:50051",
        description="the transcoder's gRPC service (`aigc-hub vistack transcoder serve`): "
        "host:port, or a gRPC target naming several (`dns:///name:port`, "
        "`ipv4:a:port,b:port`), called in turn",
    )
    run_transcoder: bool = Field(
        True,
        description="`aigc-hub up` serves a transcoder at transcoder_address when it is on "
        "this machine; false where transcoders run on their own",
    )
    transcode_deadline_s: float = Field(
        1800.0, gt=0, le=86_400, description="longest one ProcessVideo call may take"
    )
    lease_s: float = Field(
        1800.0, gt=0, description="the seed's lease:transcode:{id} TTL (SETNX 30 min)"
    )
    max_attempts: int = Field(
        7, ge=1, le=50, description="transcode attempts before the DLQ and an alert (seed: 7)"
    )
    attempts_ttl_s: float = Field(
        86_400.0, gt=0, description="life of the attempts:transcode:{id} counter (seed: 24 h)"
    )
    retry_base_s: float = Field(60.0, gt=0, description="first retry delay (seed: 1 min)")
    retry_cap_s: float = Field(8 * 3600.0, gt=0, description="longest retry delay (seed: 8 h)")
    retry_jitter: float = Field(
        0.2, ge=0, le=1, description="random share added to or taken from each delay (±20 %)"
    )
    dispatch_interval_s: float = Field(
        5.0, gt=0, description="how often the retry dispatcher scans the ZSET (seed: 5 s)"
    )
    watchdog_interval_s: float = Field(
        60.0, gt=0, description="how often the watchdog looks for stuck videos (seed: 1 min)"
    )
    processing_timeout_s: float = Field(
        900.0, gt=0, description="processing this long with no lease: re-queued (seed: 15 min)"
    )
    pending_timeout_s: float = Field(
        600.0, gt=0, description="pending this long: re-queued (seed: 10 min)"
    )
    max_upload_bytes: int = Field(
        2 << 30, ge=1024, description="largest source video a user may upload"
    )
    upload_part_size: int = Field(
        8 * 1024**2, ge=5 * 1024**2, description="upload part size when the client names none"
    )
    upload_url_ttl_s: int = Field(
        3600, ge=60, le=7 * 86_400, description="validity of the signed upload part URLs"
    )
    manifest_url_ttl_s: int = Field(
        3600, ge=60, le=7 * 86_400, description="validity of a signed manifest or cover URL"
    )
    url_secret: SecretStr = Field(
        SecretStr(""),
        description="HMAC secret of playback grants (the manifest URL); every API process "
        "needs the same one; empty = a random secret of this process",
    )
    danmaku_per_s: float = Field(
        5.0, gt=0, description="danmaku one user may post per second (sustained)"
    )
    danmaku_burst: int = Field(20, ge=1, description="danmaku one user may post at once")
    comments_per_min: float = Field(
        20.0, gt=0, description="comments one user may post per minute (sustained)"
    )
    danmaku_batch: int = Field(500, ge=1, le=10_000, description="danmaku per batched insert")
    danmaku_wait_s: float = Field(
        0.05, ge=0, le=10, description="longest a danmaku waits for its batch to fill"
    )
