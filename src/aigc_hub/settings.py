"""One Settings object, read once at start-up; every field has an ``AIGC_HUB_`` env twin."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from aigc_hub.reliability.notification_feed import FeedSettings

#: The shortest console secret accepted, in characters (a short one is guessable offline).
MIN_CONSOLE_SECRET = 32
#: Idle keep-alive seconds of the hub's HTTP servers. uvicorn's default (5 s) equals httpx's
#: pool expiry, so a client may send on a connection the server is closing at that moment
#: ("Server disconnected without sending a response"); a longer server side ends that race.
API_KEEP_ALIVE_S = 75


@dataclass(frozen=True)
class Limits:
    """The HTTP API's limits, one value per app (``app.state.limits``).

    A plain value kept here, in the backbone, so settings can build it without importing
    the HTTP layer; ``interfaces/http/limits.py`` enforces it.
    """

    max_body_bytes: int = 1 << 20
    max_json_depth: int = 32
    rate_per_s: float = 20.0
    burst: float = 40.0


class Settings(BaseSettings):
    """Where data lives and which engines run; embedded defaults need nothing installed."""

    model_config = SettingsConfigDict(env_prefix="AIGC_HUB_", extra="ignore")

    data_dir: Path = Field(Path("var"), description="folder for the SQLite files and blobs")
    database_url: str | None = Field(
        None, description="SQLAlchemy URL; default sqlite:///<data_dir>/hub.db; PostgreSQL at scale"
    )
    broker: Literal["embedded", "kafka", "memory"] = Field(
        "embedded", description="messaging engine: embedded SQLite log, Kafka, or memory (tests)"
    )
    kafka_bootstrap: str = Field(
        "127.0.0.1:9092", description="Kafka bootstrap servers when broker=kafka"
    )
    kafka_consumer_config: str = Field(
        "", description="extra librdkafka consumer settings: 'key=value,…'"
    )
    kafka_producer_config: str = Field(
        "", description="extra librdkafka producer settings: 'key=value,…'"
    )
    redis_url: str | None = Field(
        None, description="redis://host:port/db for leases, timers, rate limits; none = in-process"
    )
    blob_url: str | None = Field(
        None, description="file:///path (default <data_dir>/blobs) or s3://bucket"
    )
    s3_endpoint: str | None = Field(None, description="S3 endpoint URL (S3-compatible stores)")
    s3_access_key: str | None = Field(None, description="S3 access key id")
    s3_secret_key: str | None = Field(None, description="S3 secret access key")
    s3_region: str = Field("us-east-1", description="S3 region for request signing")
    blob_signing_key: str | None = Field(
        None, description="HMAC key for local signed blob URLs; default: generated per data dir"
    )
    api_host: str = Field("127.0.0.1", description="where `aigc-hub api` listens")
    api_port: int = Field(8000, ge=0, le=65535, description="port of `aigc-hub api`")
    api_rate_per_s: float = Field(
        20.0, gt=0, description="requests per second per tenant (token bucket refill)"
    )
    api_burst: float = Field(40.0, gt=0, description="requests a tenant may send at once")
    api_max_body_bytes: int = Field(1 << 20, ge=1024, description="largest request body")
    api_keep_alive_s: int = Field(
        API_KEEP_ALIVE_S,
        ge=1,
        description="seconds an idle keep-alive connection stays open; longer than clients' "
        "pool expiry (httpx: 5 s) so a client never sends on a connection being closed",
    )
    api_key_cache_s: float = Field(
        5.0,
        ge=0,
        description="seconds an API process remembers a live API key; a key revoked by another "
        "process may be accepted that long (0 = look it up on every request)",
    )
    console_secret: SecretStr = Field(
        SecretStr(""),
        description="signs web console sessions; give every API process the same value "
        "(at least 32 characters) to share logins; empty = random per process",
    )
    metrics_host: str = Field("127.0.0.1", description="where worker/relay/scan serve /metrics")
    metrics_port: int | None = Field(
        None, ge=0, le=65535, description="port for /metrics in worker/relay/scan; none = off"
    )
    lag_interval_s: float = Field(10.0, gt=0, description="lag monitor sampling period")
    lag_thresholds: str = Field(
        "", description="extra thresholds: 'topic=lag[/age_s],…' (e.g. 'transcode=500/120')"
    )
    alert_webhook: str | None = Field(
        None, description="URL that receives alerts (POST JSON): consumer lag, transcodes given up"
    )
    failpoints: str = Field(
        "",
        description="crash tests only: `name=kill` (SIGKILL), `name=crash` or `name=stop` "
        "(SIGSTOP), comma separated, arms those failpoints in this process; never set in "
        "production",
    )
    scanner_lease_ttl_ms: int = Field(15_000, ge=500, description="scanner leader lease TTL")
    log_json: bool = Field(True, description="JSON log lines (structlog); false = plain text")
    log_level: str = Field("INFO", description="DEBUG, INFO, WARNING or ERROR")
    log_path: Path | None = Field(None, description="embedded log file; default <data_dir>/log.db")
    pipelines: str | None = Field(
        None,
        description="pipelines to run: installed names or 'module:attribute', comma separated; "
        "unset = every installed pipeline, empty = none",
    )
    concurrency: int = Field(4, ge=1, le=256, description="default records in flight per group")
    commit_batch: int = Field(256, ge=1, le=10_000, description="max events per group commit")
    commit_wait_ms: float = Field(2.0, ge=0, le=1000, description="max wait to fill a group commit")
    relay_batch: int = Field(500, ge=1, le=10_000, description="outbox rows per relay pass")
    sse_heartbeat_s: float = Field(15.0, gt=0, le=300, description="SSE heartbeat period")
    sse_window_size: int = Field(
        10_000, ge=1, le=1_000_000, description="notifications kept per process for resume"
    )
    sse_window_s: float = Field(600.0, gt=0, description="longest resume window, seconds")
    sse_queue_size: int = Field(
        1_000, ge=1, le=100_000, description="notifications queued per SSE client before a reset"
    )
    sse_max_stream_s: float = Field(
        3_600.0, gt=0, description="longest SSE connection; clients reconnect with Last-Event-ID"
    )

    def feed_settings(self) -> FeedSettings:
        """The notification feed's and SSE route's bounds."""
        return FeedSettings(
            window_size=self.sse_window_size,
            window_s=self.sse_window_s,
            queue_size=self.sse_queue_size,
            heartbeat_s=self.sse_heartbeat_s,
            max_stream_s=self.sse_max_stream_s,
        )

    def resolved_database_url(self) -> str:
        """The database URL, defaulting to a SQLite file under ``data_dir``."""
        return self.database_url or f"sqlite:///{self.data_dir / 'hub.db'}"

    def kafka_options(self) -> dict[str, dict[str, str]]:
        """Extra librdkafka settings as ``consumer_overrides`` / ``producer_overrides``."""
        return {
            "consumer_overrides": _pairs(self.kafka_consumer_config),
            "producer_overrides": _pairs(self.kafka_producer_config),
        }

    @field_validator("console_secret")
    @classmethod
    def _long_enough(cls, value: SecretStr) -> SecretStr:
        if 0 < len(value.get_secret_value()) < MIN_CONSOLE_SECRET:
            raise ValueError(f"use at least {MIN_CONSOLE_SECRET} characters (or none)")
        return value

    def console_secret_bytes(self) -> bytes | None:
        """The console's session secret, or None for a random one per process."""
        return self.console_secret.get_secret_value().encode() or None

    def api_limits(self) -> Limits:
        """The HTTP API's limits as these settings give them."""
        return Limits(
            max_body_bytes=self.api_max_body_bytes,
            rate_per_s=self.api_rate_per_s,
            burst=self.api_burst,
        )

    def resolved_log_path(self) -> Path:
        """The embedded log's file."""
        return self.log_path or self.data_dir / "log.db"


def _pairs(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"bad setting {item!r}: use key=value")
        out[key.strip()] = value.strip()
    return out
