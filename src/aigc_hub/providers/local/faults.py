"""Fault switches for tests (``POST /_faults``) and the counters ``GET /_stats`` shows.

Counters named ``*_next`` are consumed one per matching event, so a test says "the next two
submits" rather than "for a while". Switches merge: posting one field leaves the others.
"""

from __future__ import annotations

from typing import Literal

import pydantic

CounterName = Literal[
    "rate_limit_next", "server_error_next", "accept_then_timeout_next", "fail_next", "black_next"
]


class Faults(pydantic.BaseModel):
    """The provider's misbehaviour, all off by default."""

    model_config = pydantic.ConfigDict(extra="forbid")

    latency_ms: int = pydantic.Field(0, ge=0, le=60_000)  # added to every API call
    rate_limit_next: int = pydantic.Field(0, ge=0)  # next n API calls -> 429 + Retry-After
    retry_after_s: int = pydantic.Field(1, ge=0, le=3600)
    server_error_next: int = pydantic.Field(0, ge=0)  # next n API calls -> 503
    accept_then_timeout_next: int = pydantic.Field(0, ge=0)  # job made, answer after hang_s
    hang_s: float = pydantic.Field(5.0, ge=0, le=120)
    drop_webhooks: bool | int = False  # True: all; n: the next n deliveries
    duplicate_webhooks: bool = False  # every delivery is sent twice (same webhook-id)
    reorder_webhooks: bool = False  # hold non-final webhooks, send them after the final one
    expire_outputs: bool = False  # output URLs are born expired
    fail_next: int = pydantic.Field(0, ge=0)  # next n submitted jobs end failed
    fail_code: str = "internal_error"
    black_next: int = pydantic.Field(0, ge=0)  # next n jobs succeed with all-black video
    render_seconds: float = pydantic.Field(0.0, ge=0, le=120)  # extra time per job


class FaultState:
    """The current switches and the server's counters."""

    def __init__(self) -> None:
        self.faults = Faults()
        self.submits = 0
        self.webhooks_sent = 0
        self.webhooks_failed = 0
        self.webhooks_dropped = 0

    def merge(self, changes: dict[str, object]) -> Faults:
        """Apply the given switches on top of the current ones (validated as a whole)."""
        merged = {**self.faults.model_dump(), **changes}
        self.faults = Faults.model_validate(merged)
        return self.faults

    def take(self, name: CounterName) -> bool:
        """Consume one unit of counter ``name``; True when the fault fires."""
        left: int = getattr(self.faults, name)
        if left <= 0:
            return False
        setattr(self.faults, name, left - 1)
        return True

    def take_drop(self) -> bool:
        """Whether to drop this webhook delivery (consumes one when a count was given)."""
        drop = self.faults.drop_webhooks
        if drop is True:
            return True
        if drop is False or drop <= 0:
            return False
        self.faults.drop_webhooks = drop - 1
        return True
