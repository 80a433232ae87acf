"""Settings of the avcc pipeline; each has an ``AIGC_HUB_AVCC_`` environment twin."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "AIGC_HUB_AVCC_"


class AvccSettings(BaseSettings):
    """The code's segments, the chain a work is notarized on, review and signing material."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="ignore", hide_input_in_errors=True
    )

    country: str = Field(
        "156", pattern=r"^[0-9]{3}$", description="ISO 3166-1 numeric country of the issuer"
    )
    issuer: str = Field(
        "10005", pattern=r"^[0-9]{3,8}$", description="the issuer's registered code (segment 3)"
    )
    platform_node: str = Field(
        "8361", pattern=r"^[0-9]{2,8}$", description="this platform's node code (segment 4)"
    )
    chain: Literal["log", "evm"] = Field(
        "log",
        description="where works are notarized: `log` (the embedded verifiable log) or `evm` "
        "(the log's signed roots anchored on an EVM chain over JSON-RPC)",
    )
    log_key_path: str = Field(
        "",
        description="PEM file of the log's Ed25519 key (created when missing); "
        "empty = <data dir>/avcc/log-key.pem",
    )
    evm_rpc_url: str = Field("", description="JSON-RPC URL of the EVM node (chain=evm)")
    evm_private_key: SecretStr = Field(
        SecretStr(""), description="hex private key of the anchoring account (chain=evm)"
    )
    batch_window_ms: int = Field(
        500,
        ge=0,
        le=60_000,
        description="how long a G or P work may wait for others to share its chain "
        "transaction; O works never wait (the seed's seconds-level fast path)",
    )
    batch_max: int = Field(
        64,
        ge=1,
        le=10_000,
        description="works per chain transaction; a full batch leaves at once, so keep it at "
        "most the avcc-chain group's concurrency (64), or G works always wait the window",
    )
    c2pa_cert_path: str = Field(
        "",
        description="PEM certificate chain the platform signs C2PA manifests with; empty = a "
        "CA of the hub's own, made in <data dir>/avcc/c2pa (trusted by whoever imports its root)",
    )
    c2pa_key_path: str = Field("", description="PEM private key of that certificate")
    max_content_bytes: int = Field(
        512 * 1024 * 1024, ge=1, description="largest work an application may name"
    )
    human_lease_s: int = Field(
        900, ge=10, le=86_400, description="how long a reviewer's claim on a work lasts"
    )
    stuck_after_s: int = Field(
        900,
        ge=10,
        description="a work waiting this long after its last move gets its event again "
        "(the stuck-records scanner)",
    )
    duplicate_scope: Literal["all", "tenant"] = Field(
        "all",
        description="near-duplicates are looked for among every coded work (`all`) or only "
        "the applying tenant's",
    )

    # -- playback telemetry (gateway-svc, clickhouse-sink, flink-job) ----------------------
    analytics_url: str = Field(
        "",
        description="where playback events are stored: empty = DuckDB at "
        "<data dir>/avcc/playback.duckdb; `duckdb:///path` for another file; "
        "`clickhouse://user:password@host:8123/database` (or `https://`) for ClickHouse",
    )
    playback_max_events: int = Field(
        4000,
        ge=1,
        le=50_000,
        description="events one POST /v1/avcc/playback may carry (at ~240 bytes an event, "
        "4000 fit AIGC_HUB_API_MAX_BODY_BYTES' 1 MiB; raise both together)",
    )
    playback_max_age_s: int = Field(
        3 * 86_400,
        ge=60,
        description="oldest event timestamp accepted (the topic keeps 3 days, seed 000 §9.1)",
    )
    playback_max_skew_s: int = Field(
        300, ge=0, description="how far in the future an event's timestamp may be (node clocks)"
    )
    # The detector's windows and thresholds (docs/avcc.md "Anomalies" says how each is used).
    detector_window_s: int = Field(
        1, ge=1, le=3600, description="tumbling event-time window of the anomaly detector"
    )
    detector_lateness_ms: int = Field(
        1000, ge=0, le=600_000, description="how late an event may arrive and still count"
    )
    detector_idle_ms: int = Field(
        2000,
        ge=100,
        description="a partition silent this long (processing time) no longer holds the "
        "watermark back",
    )
    detector_forget_s: int = Field(
        3600,
        ge=1,
        description="a code, node or user hash silent this long (event time) loses its baseline",
    )
    detector_max_subjects: int = Field(
        100_000,
        ge=1,
        description="baselines one detector keeps per judge; past it the least recently seen "
        "subject is forgotten",
    )
    spike_factor: float = Field(
        5.0, gt=1.0, description="a window's plays above this multiple of the code's baseline"
    )
    spike_min_plays: int = Field(50, ge=1, description="fewest plays in a window to call a spike")
    spike_warmup_windows: int = Field(
        10,
        ge=1,
        description="windows of a subject's history before it is judged (spike, ratio, "
        "revenue per play); also the span of the baselines",
    )
    ratio_floor: float = Field(
        0.25,
        gt=0.0,
        lt=1.0,
        description="complete/play ratio below this fraction of the code's baseline collapses",
    )
    ratio_min_plays: int = Field(
        50,
        ge=1,
        description="fewest plays in a window to judge its complete/play ratio and its "
        "revenue per play",
    )
    flood_events: int = Field(
        60,
        ge=2,
        description="events from one user hash in one window that make a flood",
    )
    revenue_per_purchase_max_cny: float = Field(
        500.0, gt=0, description="a purchase above this (CNY) is out of range"
    )
    revenue_z: float = Field(
        6.0, gt=0, description="revenue per play this many deviations off the code's baseline"
    )

    # -- settlement (settlement-svc) -------------------------------------------------------
    creator_share_bps: int = Field(
        7000, ge=0, le=10_000, description="the work's tenant's share of a purchase (basis points)"
    )
    node_share_bps: int = Field(
        2000,
        ge=0,
        le=10_000,
        description="the reporting platform node's share (basis points); the hub keeps the "
        "rest and every rounding remainder",
    )
    settlement_period_s: int = Field(
        86_400,
        ge=60,
        multiple_of=60,
        description="length of a settlement period (UTC-aligned, whole minutes)",
    )
    settlement_grace_s: int = Field(
        300,
        ge=0,
        description="how long after a period ends its late purchases are still booked into it "
        "before it is sealed and notarized",
    )
