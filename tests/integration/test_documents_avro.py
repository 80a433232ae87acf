"""Uploads published as Avro by a producer outside the hub (seed 003 §9), on PostgreSQL and
Kafka (Tansu): confluent-kafka's ``AvroSerializer``, its ``SchemaRegistryClient`` pointed at
the hub's own registry, and its ``Producer`` put a ``documents-uploaded`` record in the
Confluent wire format on the topic; the hub's chunking workers read it and the document is
chunked, embedded and stored. A record naming a schema the registry does not know, or whose
body does not fit its schema, is dead-lettered with the reason, not retried."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub import tenancy
from aigc_hub.interfaces.http.schema_registry import PREFIX
from aigc_hub.pipelines.documents import events, services
from aigc_hub.pipelines.documents.avro import DOCUMENT_UPLOADED
from aigc_hub.pipelines.documents.models import documents_chunks, documents_tasks
from aigc_hub.pipelines.documents.services import TaskSnapshot
from aigc_hub.reliability.dlq import DeadLetterFilter
from aigc_hub.store import tables
from aigc_hub.testing.tansu import KafkaEndpoint
from tests.support.documents import DocumentsStack, documents_stack, wait_ended
from tests.support.hubs import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

TOPIC = events.UPLOADED_TOPIC
TEXT = (
    "# Lighthouses\n\nThe keeper climbed one hundred and twelve steps every evening to light "
    "the lamp. In fog the horn sounded twice a minute until dawn.\n"
) * 12


async def _without_its_event(conn: AsyncConnection, task: TaskSnapshot) -> None:
    """Take the upload's JSON event out of the outbox: the Avro producer sends it instead."""
    await conn.execute(sa.delete(tables.outbox).where(tables.outbox.c.key == task.document_id))


async def _uploaded_by_another_service(stack: DocumentsStack, tenant_id: str) -> dict[str, Any]:
    """A stored document and its queued task, as the seed's API service leaves them; the
    record it would publish (the seed's v2.1 fields)."""
    task = await services.submit(
        stack.docs,
        tenant_id=tenant_id,
        user_id="user-1",
        kb_id="kb",
        file_name="lighthouses.md",
        declared_mime="text/markdown",
        data=TEXT.encode(),
        analysis=False,
        before_commit=_without_its_event,
    )
    async with stack.hub.engine.connect() as conn:
        row = (
            (
                await conn.execute(
                    sa.select(documents_tasks).where(documents_tasks.c.id == task.task_id)
                )
            )
            .mappings()
            .one()
        )
    return {
        "eventId": f"evt-{uuid.uuid4().hex}",  # not a UUID: the hub derives one from it
        "taskId": task.task_id,
        "documentId": task.document_id,
        "knowledgeBaseId": "kb",
        "storageKey": row["storage_key"],
        "fileName": row["file_name"],
        "fileSizeBytes": row["size_bytes"],
        "mimeType": row["mime_type"],
        "userId": "user-1",
        "priority": "high",
        "eventTimestamp": row["created_at"],
        "retryCount": 0,
        "traceId": None,
        "aiAnalysisRequired": False,
    }


#: Makes a registry client for a stack (the fixture below).
Registries = Callable[[DocumentsStack], Awaitable[SchemaRegistryClient]]


@pytest.fixture
def registries() -> Iterator[Registries]:
    """confluent-kafka's registry clients on a stack's registry (with a new admin key, as a
    producer is given), closed after the test."""
    made: list[SchemaRegistryClient] = []

    async def registry_of(stack: DocumentsStack) -> SchemaRegistryClient:
        admin_key = await tenancy.create_admin_key(stack.hub.engine)
        conf = {"url": stack.api_url + PREFIX, "basic.auth.user.info": f"producer:{admin_key}"}
        made.append(SchemaRegistryClient(conf))
        return made[-1]

    yield registry_of
    for client in made:
        client.close()


def chunking_only(
    pg_url: str, kafka: KafkaEndpoint, tmp_path: Path
) -> contextlib.AbstractAsyncContextManager[DocumentsStack]:
    """A documents stack on PostgreSQL and Kafka running the chunking workers alone."""
    return documents_stack(pg_url, kafka.broker(), tmp_path, groups=["chunking-workers"])


def _produce(kafka: KafkaEndpoint, records: list[tuple[str, bytes]]) -> None:
    """confluent-kafka's producer, as another service runs it: (key, value) records."""
    producer = Producer({"bootstrap.servers": kafka.bootstrap, **kafka.producer_settings})
    for key, value in records:
        producer.produce(TOPIC, key=key.encode(), value=value)
    assert producer.flush(30) == 0


async def test_an_upload_serialized_by_confluent_avro_is_read_by_the_chunking_workers(
    pg_url: str,
    kafka_endpoint: KafkaEndpoint,
    tmp_path: Path,
    registries: Registries,
) -> None:
    async with documents_stack(pg_url, kafka_endpoint.broker(), tmp_path) as stack:
        tenant, _key = await tenancy.create_tenant(stack.hub.engine, "studio")
        record = await _uploaded_by_another_service(stack, tenant.id)
        registry = await registries(stack)
        serialize = AvroSerializer(registry, json.dumps(DOCUMENT_UPLOADED))
        context = SerializationContext(TOPIC, MessageField.VALUE)
        value = await asyncio.to_thread(serialize, record, context)
        assert value is not None and value[:1] == b"\x00"  # Confluent's wire format
        # Sent twice, as a producer retrying after a lost ack: one effect.
        key = record["documentId"]
        await asyncio.to_thread(_produce, kafka_endpoint, [(key, value), (key, value)])
        async with stack.client(_key) as client:
            ended = await wait_ended(client, [record["taskId"]], timeout_s=120)
        task = ended[record["taskId"]]
        async with stack.hub.engine.connect() as conn:
            chunks = int(
                await conn.scalar(
                    sa.select(sa.func.count())
                    .select_from(documents_chunks)
                    .where(documents_chunks.c.document_id == key)
                )
                or 0
            )
        store = await stack.docs.vectors()
        vectors = await store.count(stack.docs.embedder.name, document_id=key)
        subjects = await asyncio.to_thread(registry.get_subjects)
    assert task["status"] == "completed", task
    assert chunks == task["chunks_total"] == vectors >= 2
    assert subjects == [f"{TOPIC}-value"]  # registered by the serializer itself


async def test_an_avro_record_of_an_unknown_schema_or_a_bad_body_is_dead_lettered_at_once(
    pg_url: str,
    kafka_endpoint: KafkaEndpoint,
    tmp_path: Path,
    registries: Registries,
) -> None:
    async with chunking_only(pg_url, kafka_endpoint, tmp_path) as stack:
        serialize = AvroSerializer(await registries(stack), json.dumps(DOCUMENT_UPLOADED))
        record = {
            "eventId": "evt-1",
            "taskId": "task-1",
            "documentId": "doc-good",
            "knowledgeBaseId": "kb",
            "storageKey": "documents/none",
            "fileName": "a.txt",
            "fileSizeBytes": 1,
            "mimeType": "text/plain",
            "userId": "u",
            "eventTimestamp": 0,
        }
        good = await asyncio.to_thread(
            serialize, record, SerializationContext(TOPIC, MessageField.VALUE)
        )
        assert good is not None
        schema_id = int.from_bytes(good[1:5], "big")
        unknown = b"\x00" + (schema_id + 1000).to_bytes(4, "big") + good[5:]
        cut = good[:12]  # the header and a few bytes of the first string
        await asyncio.to_thread(
            _produce, kafka_endpoint, [("doc-unknown", unknown), ("doc-cut", cut)]
        )

        async def both_dead_lettered() -> bool:
            flt = DeadLetterFilter(consumer="chunking-workers", topic=TOPIC)
            return await stack.hub.dlq.count(flt) == 2

        await wait_until(both_dead_lettered, timeout=60)
        letters = await stack.hub.dlq.list(DeadLetterFilter(consumer="chunking-workers"))
    by_key = {letter.key: letter for letter in letters}
    unknown_letter, cut_letter = by_key["doc-unknown"], by_key["doc-cut"]
    assert "unknown to the registry" in unknown_letter.error_message
    assert f"does not match schema {schema_id}" in cut_letter.error_message
    for letter in (unknown_letter, cut_letter):
        assert letter.error_class == "EnvelopeError"
        assert letter.attempts == 1  # not retried: the same bytes never decode
        assert letter.value[:1] == b"\x00"  # kept as sent, for a look or a fixed replay


async def test_an_avro_upload_that_failed_in_its_handler_is_replayed_after_the_fix(
    pg_url: str,
    kafka_endpoint: KafkaEndpoint,
    tmp_path: Path,
    registries: Registries,
) -> None:
    async with chunking_only(pg_url, kafka_endpoint, tmp_path) as stack:
        tenant, key = await tenancy.create_tenant(stack.hub.engine, "studio")
        record = await _uploaded_by_another_service(stack, tenant.id)
        # The other service names a file it never stored: chunking cannot read it.
        record["storageKey"] += ".lost"
        serialize = AvroSerializer(await registries(stack), json.dumps(DOCUMENT_UPLOADED))
        value = await asyncio.to_thread(
            serialize, record, SerializationContext(TOPIC, MessageField.VALUE)
        )
        assert value is not None
        await asyncio.to_thread(_produce, kafka_endpoint, [(record["documentId"], value)])
        flt = DeadLetterFilter(consumer="chunking-workers", topic=TOPIC)

        async def dead_lettered() -> bool:
            return await stack.hub.dlq.count(flt) == 1

        await wait_until(dead_lettered, timeout=60)
        [letter] = await stack.hub.dlq.list(flt)
        async with stack.client(key) as client:
            failed = (await client.get(f"/v1/documents/tasks/{record['taskId']}")).json()
            # The fix: the file is stored where the record says; the dead letter replayed.
            await stack.docs.store.put(record["storageKey"], TEXT.encode(), "text/markdown")
            await stack.hub.dlq.replay(letter.id, actor="operator")

            async def chunked() -> bool:
                task = (await client.get(f"/v1/documents/tasks/{record['taskId']}")).json()
                return bool(task["status"] == "processing" and task["chunks_total"])

            await wait_until(chunked, timeout=60)
    assert failed["status"] == "failed" and letter.error_class == "BlobNotFound"
    # Kept as the envelope it was read as: the dead-letter store replays JSON envelopes.
    replayed = letter.envelope()
    assert replayed is not None and replayed.payload["storageKey"] == record["storageKey"]
