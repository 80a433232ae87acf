"""Time-ordered identifiers (UUIDv7) for business objects and events."""

from __future__ import annotations

import uuid

import uuid6


def new_id() -> uuid.UUID:
    """Return a fresh UUIDv7: unique, and sortable by creation time (ms precision)."""
    return uuid.UUID(str(uuid6.uuid7()))


def new_id_str() -> str:
    """Return a fresh UUIDv7 as its canonical 36-character string."""
    return str(new_id())


def is_uuid(value: str) -> bool:
    """True when ``value`` parses as a UUID of any version."""
    try:
        uuid.UUID(value)
    except (ValueError, AttributeError, TypeError):
        return False
    return True
