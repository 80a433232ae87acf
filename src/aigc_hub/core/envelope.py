"""The event envelope: one frozen, typed model for every message on the backbone.

Broker-specific details (partition, offset, dead-letter reasons) travel in headers,
never in the envelope, so an envelope means the same thing on every engine.
"""

from __future__ import annotations

import re
import time
import uuid
from typing import Any

import pydantic

from aigc_hub.core import ids
from aigc_hub.core.errors import EnvelopeError

_EVENT_TYPE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+$")


class Envelope(pydantic.BaseModel):
    """An event: who said what, about which key, caused by what; immutable once built."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid", strict=False)

    event_id: str
    event_type: str
    schema_version: int = pydantic.Field(default=1, ge=1)
    timestamp: int = pydantic.Field(ge=0, description="epoch milliseconds")
    source: str = pydantic.Field(min_length=1)
    tenant_id: str | None = None
    key: str = pydantic.Field(min_length=1, description="partition key, e.g. the aggregate id")
    trace_id: str | None = None
    correlation_id: str | None = None
    causation_id: str | None = None
    attempt: int = pydantic.Field(default=0, ge=0)
    payload: dict[str, Any] = pydantic.Field(default_factory=dict)

    @pydantic.field_validator("event_id")
    @classmethod
    def _event_id_is_uuid(cls, value: str) -> str:
        try:
            return str(uuid.UUID(value))
        except ValueError as exc:
            raise ValueError("must be a UUID") from exc

    @pydantic.field_validator("event_type")
    @classmethod
    def _event_type_is_dotted(cls, value: str) -> str:
        if not _EVENT_TYPE.match(value):
            raise ValueError("must be dotted lower-case words, e.g. 'avcc.apply.created'")
        return value

    @classmethod
    def new(
        cls,
        event_type: str,
        payload: dict[str, Any],
        *,
        key: str,
        source: str,
        schema_version: int = 1,
        tenant_id: str | None = None,
        trace_id: str | None = None,
        correlation_id: str | None = None,
        causation_id: str | None = None,
        timestamp: int | None = None,
    ) -> Envelope:
        """Build a fresh envelope with a new UUIDv7 id; raises EnvelopeError on bad fields."""
        return cls.parse_obj_checked(
            {
                "event_id": ids.new_id_str(),
                "event_type": event_type,
                "schema_version": schema_version,
                "timestamp": timestamp if timestamp is not None else time.time_ns() // 1_000_000,
                "source": source,
                "tenant_id": tenant_id,
                "key": key,
                "trace_id": trace_id,
                "correlation_id": correlation_id,
                "causation_id": causation_id,
                "payload": payload,
            }
        )

    def derive(
        self,
        event_type: str,
        payload: dict[str, Any],
        *,
        key: str | None = None,
        source: str | None = None,
        schema_version: int = 1,
        timestamp: int | None = None,
    ) -> Envelope:
        """An event caused by this one: same tenant, trace and correlation; causation = us."""
        return Envelope.new(
            event_type,
            payload,
            key=key or self.key,
            source=source or self.source,
            schema_version=schema_version,
            tenant_id=self.tenant_id,
            trace_id=self.trace_id,
            correlation_id=self.correlation_id or self.key,
            causation_id=self.event_id,
            timestamp=timestamp,
        )

    def with_attempt(self, attempt: int) -> Envelope:
        """A copy carrying another delivery attempt number."""
        return self.model_copy(update={"attempt": attempt})

    def to_bytes(self) -> bytes:
        """Serialize as compact UTF-8 JSON."""
        return self.model_dump_json().encode()

    @classmethod
    def from_bytes(cls, data: bytes | str) -> Envelope:
        """Parse JSON bytes; raises EnvelopeError naming the first bad field."""
        try:
            return cls.model_validate_json(data)
        except pydantic.ValidationError as exc:
            raise _envelope_error(exc) from None

    @classmethod
    def parse_obj_checked(cls, data: dict[str, Any]) -> Envelope:
        """Validate a dict; raises EnvelopeError naming the first bad field."""
        try:
            return cls.model_validate(data)
        except pydantic.ValidationError as exc:
            raise _envelope_error(exc) from None


def _envelope_error(exc: pydantic.ValidationError) -> EnvelopeError:
    first = exc.errors()[0]
    loc = ".".join(str(p) for p in first.get("loc", ())) or "$"
    if first.get("type") == "json_invalid":
        return EnvelopeError("$", "not valid JSON")
    return EnvelopeError(loc, str(first.get("msg", "invalid")))
