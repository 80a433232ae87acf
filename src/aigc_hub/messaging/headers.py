"""Header keys of the backbone, one place for all of them."""

from __future__ import annotations

EVENT_ID = "event-id"
EVENT_TYPE = "event-type"
SCHEMA_VERSION = "schema-version"
TRACEPARENT = "traceparent"
TENANT_ID = "tenant-id"

# Dead-letter reasons (seed 000 §9.3.3; Spring's DeadLetterPublishingRecoverer shape).
DLQ_REASON = "dlq-reason"
DLQ_ORIGINAL_TOPIC = "dlq-original-topic"
DLQ_ORIGINAL_PARTITION = "dlq-original-partition"
DLQ_ORIGINAL_OFFSET = "dlq-original-offset"
DLQ_CONSUMER = "dlq-consumer"
DLQ_ERROR_CLASS = "dlq-error-class"
DLQ_ERROR_MESSAGE = "dlq-error-message"
DLQ_ATTEMPTS = "dlq-attempts"
DLQ_FIRST_FAILURE = "dlq-first-failure-ms"
DLQ_LAST_FAILURE = "dlq-last-failure-ms"

# Set on a replayed dead letter so consumers and tools can tell.
REPLAYED_FROM_DLQ = "replayed-from-dlq"


def for_envelope(
    event_id: str, event_type: str, schema_version: int, trace_id: str | None, tenant_id: str | None
) -> dict[str, str]:
    """The standard headers of an envelope (W3C ``traceparent`` when a trace id is set)."""
    headers = {EVENT_ID: event_id, EVENT_TYPE: event_type, SCHEMA_VERSION: str(schema_version)}
    if trace_id:
        headers[TRACEPARENT] = traceparent(trace_id, event_id)
    if tenant_id:
        headers[TENANT_ID] = tenant_id
    return headers


def traceparent(trace_id: str, span_seed: str) -> str:
    """A W3C traceparent for ``trace_id`` (32 hex) with a span id derived from ``span_seed``."""
    trace_hex = "".join(c for c in trace_id.lower() if c in "0123456789abcdef")[:32].rjust(32, "0")
    span_hex = "".join(c for c in span_seed.lower() if c in "0123456789abcdef")[-16:].rjust(16, "0")
    return f"00-{trace_hex}-{span_hex}-01"
