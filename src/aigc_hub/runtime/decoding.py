"""How a consumed record's bytes become an :class:`Envelope`.

The hub's own events are JSON envelopes. A record from a producer outside the hub may be in
another wire format (Confluent's Avro: see :mod:`aigc_hub.schemas.avro_envelopes`); the hub
hands the consumer runtime a :class:`RecordDecoder` that knows the formats its pipelines
declared. Undecodable bytes raise a ``HubError``: the record is dead-lettered with the
reason, never retried (the same bytes never decode). A hub whose pipelines declare no other
format has none, and the runtime parses JSON inline (no extra await per record).
"""

from __future__ import annotations

from typing import Protocol

from aigc_hub.core.envelope import Envelope


class RecordDecoder(Protocol):
    """Turns a record's value, read from ``topic``, into an envelope."""

    async def envelope(self, topic: str, value: bytes) -> Envelope:
        """The envelope ``value`` holds; a ``HubError`` when it holds none."""
        ...
