"""Settings of the generation pipeline; each has an ``AIGC_HUB_GEN_`` environment twin."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class GenerationSettings(BaseSettings):
    """Providers, slot limits, polling and the deadlines the scanners enforce."""

    model_config = SettingsConfigDict(env_prefix="AIGC_HUB_GEN_", extra="ignore")

    local_provider_url: str = Field(
        "http://127.0.0.1:8100", description="base URL of the `local` provider"
    )
    local_webhook_secrets: str = Field(
        "",
        description="the local provider's webhook secrets (whsec_…), comma separated; "
        "several while rotating; empty = callbacks refused, polling only",
    )
    run_local_provider: bool = Field(
        True,
        description="`aigc-hub up` serves the local provider itself when `local` is enabled "
        "and its URL is on loopback",
    )
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

    max_output_bytes: int = Field(2 * 1024**3, description="largest output accepted")
    max_attempts: int = Field(3, description="attempts per task (confirmed non-acceptance only)")

    def provider_names(self) -> list[str]:
        return [p.strip() for p in self.providers.split(",") if p.strip()]

    def local_secrets(self) -> list[str]:
        return [s.strip() for s in self.local_webhook_secrets.split(",") if s.strip()]
