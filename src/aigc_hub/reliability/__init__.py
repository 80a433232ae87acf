"""Reliability patterns, each implemented once: outbox + relay, inbox, DLQ, redelivery, leases,
and those pipelines share: circuit breaker, webhook verification, slots."""
