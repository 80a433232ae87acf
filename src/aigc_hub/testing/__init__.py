"""Test doubles shipped with the package: the in-memory broker with a deterministic ``drain()``."""

from __future__ import annotations

from aigc_hub.messaging.memory import MemoryBroker, MemoryConsumer

__all__ = ["MemoryBroker", "MemoryConsumer"]
