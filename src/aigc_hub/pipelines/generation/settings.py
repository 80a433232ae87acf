"""Settings of the generation pipeline; each has an ``AIGC_HUB_GEN_`` environment twin."""

from __future__ import annotations

from pydantic import Field, SecretStr, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from aigc_hub.reliability import webhooks

ENV_PREFIX = "AIGC_HUB_GEN_"


class GenerationSettings(BaseSettings):
    """Providers, slot limits, polling and the deadlines the scanners enforce."""

    # hide_input_in_errors: a refused setting may be a secret; the error names it instead.
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="ignore", hide_input_in_errors=True
    )

    local_provider_url: str = Field(
        "http://127.0.0.1:8100", description="base URL of the `local` provider"
    )
    local_webhook_secrets: str = Field(
        "",
        description="the local provider's webhook secrets (whsec_<base64>; prefix and padding "
        "optional), comma separated; "
        "several while rotating; empty = callbacks refused, polling only",
    )
    run_local_provider: bool = Field(
        True,
        description="`aigc-hub up` serves the local provider itself when `local` is enabled "
        "and its URL is on loopback",
    )
    replicate_api_key: SecretStr = Field(
        SecretStr(""), description="Replicate API token (r8_…); required when enabled"
    )
    replicate_base_url: str = Field(
        "https://api.replicate.com", description="Replicate API origin (tests: a loopback fake)"
    )
    replicate_output_hosts: str = Field(
        "https://replicate.delivery,https://*.replicate.delivery",
        description="origins Replicate outputs are downloaded from, comma separated; "
        "`*.` matches any subdomain",
    )
    replicate_webhook_secrets: str = Field(
        "",
        description="Replicate's webhook signing secrets (whsec_<base64>, from GET "
        "/v1/webhooks/default/secret), comma separated; empty = callbacks refused, polling only",
    )
    replicate_reconcile_window_s: float = Field(
        7200.0,
        description="how far back a lost Replicate submit is searched for; keep it longer "
        "than unknown_give_up_s",
    )
    fal_api_key: SecretStr = Field(SecretStr(""), description="fal API key; required when enabled")
    fal_base_url: str = Field("https://queue.fal.run", description="fal queue API origin")
    fal_output_hosts: str = Field(
        "https://fal.media,https://*.fal.media",
        description="origins fal outputs are downloaded from, comma separated",
    )
    runway_api_key: SecretStr = Field(
        SecretStr(""), description="Runway API secret; required when enabled"
    )
    runway_base_url: str = Field("https://api.dev.runwayml.com", description="Runway API origin")
    runway_output_hosts: str = Field(
        "https://dnznrvs05pmza.cloudfront.net",
        description="origins Runway outputs are downloaded from (the CloudFront host in "
        "your tasks' output URLs), comma separated",
    )
    runway_api_version: str = Field("2024-11-06", description="the X-Runway-Version sent")
    callback_base_url: str = Field(
        "http://127.0.0.1:8000", description="where providers send webhooks (…/v1/callbacks/P)"
    )
    providers: str = Field("local", description="enabled providers, in routing preference")
    submit_timeout_s: float = Field(10.0, description="a submit with no answer by then is UNKNOWN")
    query_timeout_s: float = Field(10.0, description="timeout of status queries")

    slots_platform: int = Field(64, description="provider jobs in flight, whole platform")
    slots_tenant: int = Field(8, description="provider jobs in flight per tenant")
    slots_provider: int = Field(32, description="provider jobs in flight per provider")
    slots_model: int = Field(32, description="provider jobs in flight per provider model")
    slot_ttl_s: float = Field(120.0, description="slot lease life; renewed by the slot scanner")
    tenant_weights: str = Field(
        "",
        description="fair-share weights, 'tenant_id=2,other=0.5'; unlisted tenants weigh 1",
    )
    aging_per_priority_s: float = Field(
        30.0, description="waiting this long raises a task's priority by one step"
    )

    poll_first_s: float = Field(2.0, description="first poll after a submit")
    poll_max_s: float = Field(60.0, description="longest gap between polls")
    poll_rate_per_s: float = Field(20.0, description="query requests per second per provider")

    queued_deadline_s: float = Field(1800.0, description="QUEUED longer than this fails")
    dispatching_deadline_s: float = Field(60.0, description="DISPATCHING stuck: reconcile")
    unknown_recheck_s: float = Field(15.0, description="SUBMIT_UNKNOWN: query again after")
    unknown_give_up_s: float = Field(3600.0, description="SUBMIT_UNKNOWN longer: fail, release")
    running_silence_s: float = Field(300.0, description="no observation this long: poll now")
    cancel_deadline_s: float = Field(300.0, description="CANCEL_REQUESTED unanswered: cancel")
    fetch_deadline_s: float = Field(600.0, description="OUTPUT_FETCHING stuck: fetch again")
    post_processing_deadline_s: float = Field(
        900.0, description="POST_PROCESSING stuck: process again"
    )
    urgent_fetch_within_s: float = Field(
        900.0, description="an output URL expiring sooner than this is fetched on the urgent queue"
    )

    media_profiles: str = Field(
        "proxy,hls,poster,thumbnails,waveform",
        description="variants every output needs before it is SUCCEEDED, comma separated "
        "(proxy, hls, poster, thumbnails, waveform); empty = none",
    )
    output_review: bool = Field(
        True,
        description="moderation reviews frames sampled from every output (black, frozen or "
        "wrong-length video) before it is SUCCEEDED",
    )
    media_scratch_dir: str = Field(
        "", description="where media jobs get their scratch folders (default: the temp dir)"
    )
    media_disk_high_water: float = Field(
        0.9,
        gt=0,
        le=1,
        description="media.process consumption pauses while the scratch disk is fuller than "
        "this fraction",
    )
    media_timeout_s: float = Field(600.0, description="longest one FFmpeg run may take")
    render_concurrency: int = Field(
        1, ge=1, le=64, description="exports one process renders at once (its own pool)"
    )
    render_threads: int = Field(
        1, ge=1, le=64, description="FFmpeg threads of one render node (bounds a render's cores)"
    )
    render_niceness: int = Field(
        10,
        ge=0,
        le=19,
        description="CPU niceness of render nodes' FFmpeg: on a busy host the API and the "
        "other workers get the CPU first",
    )
    render_node_attempts: int = Field(
        3, ge=1, le=10, description="runs of a failing render node before its export fails"
    )
    render_node_backoff_s: float = Field(
        1.0, ge=0, le=300, description="wait before a failed render node's second run (doubles)"
    )
    render_variants: str = Field(
        "proxy,hls,poster",
        description="variants the media worker makes of every export before it is succeeded, "
        "comma separated (as media_profiles); empty = the rendered file alone",
    )
    render_cache_bytes: int = Field(
        20 << 30, ge=0, description="bound of the render node cache in the blob store (LRU)"
    )
    orphan_grace_s: float = Field(
        3600.0,
        description="an object no asset row names is an orphan only once it is this old "
        "(uploads and fetches write the object before their row)",
    )

    max_output_bytes: int = Field(2 * 1024**3, description="largest output accepted")
    max_attempts: int = Field(3, description="attempts per task (confirmed non-acceptance only)")

    # Uploaded assets (seed 004 §3.3.3-3, §3.6.1): limits per tenant and signed URL lives.
    asset_max_bytes: int = Field(
        2 * 1024**3, ge=1, description="largest asset one upload may declare (413 above)"
    )
    asset_max_count: int = Field(
        10_000, ge=1, description="assets a tenant may hold, uploading or kept (409 above)"
    )
    asset_max_total_bytes: int = Field(
        100 * 1024**3, ge=1, description="bytes a tenant's assets may total (429 above)"
    )
    asset_part_size: int = Field(
        8 * 1024**2, ge=5 * 1024**2, description="upload part size when the client names none"
    )
    asset_upload_url_s: int = Field(
        3600, ge=60, le=7 * 24 * 3600, description="life of a presigned upload part URL"
    )
    asset_playback_s: int = Field(600, ge=10, le=24 * 3600, description="life of a playback grant")
    asset_url_secret: SecretStr = Field(
        SecretStr(""),
        description="signs playback tokens (HLS playlists served by the API); give every API "
        "process the same value (at least 32 characters); empty = random per process",
    )

    @field_validator("local_webhook_secrets", "replicate_webhook_secrets")
    @classmethod
    def _secrets_decode(cls, value: str, info: ValidationInfo) -> str:
        """Every configured secret is checked at load, so a bad one stops the start with the
        setting's name instead of answering every callback with a 500 later."""
        for n, secret in enumerate(_split(value), start=1):
            try:
                webhooks.decode_secret(secret)
            except webhooks.WebhookSecretError as exc:
                env = f"{ENV_PREFIX}{info.field_name}".upper()
                raise ValueError(f"{env}: secret {n}: {exc}") from None
        return value

    def weights(self) -> dict[str, float]:
        """``tenant_weights`` as a mapping; a malformed entry raises ValueError naming it."""
        found: dict[str, float] = {}
        for entry in (e.strip() for e in self.tenant_weights.split(",")):
            if not entry:
                continue
            tenant, sep, value = entry.partition("=")
            try:
                weight = float(value)
            except ValueError:
                weight = -1.0
            if not sep or not tenant.strip() or weight <= 0:
                raise ValueError(f"AIGC_HUB_GEN_TENANT_WEIGHTS: bad entry {entry!r}")
            found[tenant.strip()] = weight
        return found

    def media_profile_list(self) -> list[str]:
        """The required variant profiles, in the order they are made."""
        return _split(self.media_profiles)

    def render_variant_list(self) -> list[str]:
        """The variants every export needs, in the order they are made."""
        return _split(self.render_variants)

    @field_validator("media_profiles", "render_variants")
    @classmethod
    def _known_profiles(cls, value: str, info: ValidationInfo) -> str:
        known = ("proxy", "hls", "poster", "thumbnails", "waveform")
        unknown = [p for p in _split(value) if p not in known]
        if unknown:
            name = f"AIGC_HUB_GEN_{str(info.field_name).upper()}"
            raise ValueError(f"{name}: unknown {unknown}; known: {known}")
        return value

    def provider_names(self) -> list[str]:
        return [p.strip() for p in self.providers.split(",") if p.strip()]

    def local_secrets(self) -> list[str]:
        return _split(self.local_webhook_secrets)

    def webhook_secrets(self, provider: str) -> list[str]:
        """The secrets a provider's webhooks are verified with; empty = callbacks refused.

        Only Standard Webhooks signers have any: fal signs with ED25519 keys (a JWKS), which
        the gateway does not verify, and Runway sends no webhooks."""
        raw = {"local": self.local_webhook_secrets, "replicate": self.replicate_webhook_secrets}
        return _split(raw.get(provider, ""))


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]
