"""Records in Confluent's Avro wire format, read as envelopes (seed 003 §9).

A producer outside the hub (the seed's Spring service with ``KafkaAvroSerializer``, or
confluent-kafka's ``AvroSerializer``) writes a record as byte 0, the writer schema's id in
the registry (4 bytes, big-endian), then the Avro binary body. A pipeline declares which of
its topics may carry such records (:class:`AvroBinding`); for those, :class:`AvroEnvelopes`
fetches the writer schema from the hub's own registry (cached by id: a registered id never
changes its schema), reads the body with fastavro resolving it to the pipeline's reader
schema (so a v2.0 record gets the v2.1 field's default), and wraps the record as the
envelope the JSON path would have produced. Anything else is a JSON envelope.

A record naming an unknown schema id, or whose body does not match its schema, is a
``PermanentError``: it is dead-lettered with the reason, never retried.
"""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import fastavro
from fastavro.types import Schema as ParsedAvro

from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import EnvelopeError
from aigc_hub.schemas.avro_registry import errors
from aigc_hub.schemas.avro_registry.store import AvroRegistry

#: Confluent's wire format: magic byte 0, then the schema id.
MAGIC = b"\x00"
HEADER_BYTES = 5
#: Ids derived for events whose own id is not a UUID live under this namespace.
EVENT_ID_NAMESPACE = uuid.UUID("6f1c8a52-4d0e-5b7e-9a43-2f0d9c1e7b35")


@dataclass(frozen=True)
class AvroBinding:
    """How an Avro record on ``topic`` becomes an envelope of ``event_type``."""

    topic: str
    event_type: str
    schema_version: int
    #: The schema the pipeline reads with (writer schemas are resolved to it).
    reader_schema: Mapping[str, Any]
    #: The field holding the partition key (the envelope's ``key``).
    key_field: str
    #: The field holding the producer's event id (the inbox's dedupe key).
    id_field: str
    #: The field holding the event's time in epoch milliseconds, if any.
    timestamp_field: str | None = None
    #: The envelope's ``source`` when the record does not say.
    source: str = "avro"


class AvroEnvelopes:
    """A record decoder: Confluent-wire Avro on the bound topics, JSON envelopes otherwise."""

    def __init__(self, registry: AvroRegistry, bindings: Sequence[AvroBinding]) -> None:
        self.registry = registry
        self.bindings = {b.topic: b for b in bindings}
        self._readers = {b.topic: fastavro.parse_schema(dict(b.reader_schema)) for b in bindings}
        self._writers: dict[int, ParsedAvro] = {}

    async def envelope(self, topic: str, value: bytes) -> Envelope:
        binding = self.bindings.get(topic)
        if binding is None or not value.startswith(MAGIC):
            return Envelope.from_bytes(value)
        if len(value) < HEADER_BYTES:
            raise EnvelopeError("$", "an Avro record shorter than its 5-byte header")
        schema_id = int.from_bytes(value[1:HEADER_BYTES], "big")
        writer = await self._writer(schema_id)
        try:
            record = fastavro.schemaless_reader(
                io.BytesIO(value[HEADER_BYTES:]), writer, self._readers[topic]
            )
        except Exception as exc:  # fastavro raises many kinds on bytes it cannot read
            raise EnvelopeError(
                "$", f"the Avro body does not match schema {schema_id}: {exc}"
            ) from None
        if not isinstance(record, dict):
            raise EnvelopeError("$", f"schema {schema_id} does not describe a record")
        return _wrapped(binding, record)

    async def _writer(self, schema_id: int) -> ParsedAvro:
        writer = self._writers.get(schema_id)
        if writer is None:
            try:
                stored = await self.registry.schema(schema_id)
            except errors.SchemaNotFound:
                raise EnvelopeError(
                    "$", f"the Avro record names schema id {schema_id}, unknown to the registry"
                ) from None
            writer = fastavro.parse_schema(json.loads(stored.schema))
            self._writers[schema_id] = writer
        return writer


def _wrapped(binding: AvroBinding, record: dict[str, Any]) -> Envelope:
    """The envelope of ``record`` read on ``binding``'s topic."""
    key = record.get(binding.key_field)
    event_id = record.get(binding.id_field)
    if not isinstance(key, str) or not key or not isinstance(event_id, str) or not event_id:
        raise EnvelopeError(
            "$", f"an Avro record needs its {binding.key_field!r} and {binding.id_field!r}"
        )
    stamp = record.get(binding.timestamp_field) if binding.timestamp_field else None
    trace = record.get("traceId")
    return Envelope.parse_obj_checked(
        {
            "event_id": _event_id(binding.topic, event_id),
            "event_type": binding.event_type,
            "schema_version": binding.schema_version,
            "timestamp": stamp if isinstance(stamp, int) and stamp >= 0 else 0,
            "source": binding.source,
            "key": key,
            "trace_id": trace if isinstance(trace, str) else None,
            "payload": record,
        }
    )


def _event_id(topic: str, given: str) -> str:
    """The producer's event id when it is a UUID; else a UUID derived from it (and the
    topic), so each redelivery or resend of the same event has the same id in the inbox."""
    try:
        return str(uuid.UUID(given))
    except ValueError:
        return str(uuid.uuid5(EVENT_ID_NAMESPACE, f"{topic}\x00{given}"))
