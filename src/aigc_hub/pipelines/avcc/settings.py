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
