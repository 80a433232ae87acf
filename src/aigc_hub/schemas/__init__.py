"""Versioned event payload schemas: a registry of (event type, version) -> pydantic model."""
