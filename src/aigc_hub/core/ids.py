"""Time-ordered identifiers (UUIDv7) for business objects and events."""

from __future__ import annotations

import uuid

import uuid_utils


def new_id() -> uuid.UUID:
    """Return a fresh UUIDv7: unique, sortable by creation time (ms precision), and never
    stamped ahead of the clock in a burst (a counter, not the timestamp, orders ids made
    within one millisecond)."""
    return uuid.UUID(bytes=uuid_utils.uuid7().bytes)


def new_id_str() -> str:
    """Return a fresh UUIDv7 as its canonical 36-character string."""
    return str(uuid_utils.uuid7())


def is_uuid(value: str) -> bool:
    """True when ``value`` parses as a UUID of any version."""
    try:
        uuid.UUID(value)
    except (ValueError, AttributeError, TypeError):
        return False
    return True
