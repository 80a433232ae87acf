"""Reliability patterns, each implemented once: outbox + relay, inbox, DLQ, redelivery, leases."""
