"""The hub's schema registry served by uvicorn, driven by confluent-kafka's own clients.

``SchemaRegistryClient``, ``AvroSerializer`` and ``AvroDeserializer`` are synchronous (httpx
underneath): they run in a worker thread while the server answers on the test's loop.
Error codes Confluent's client does not expose (verbose checks, media types) are read with
httpx. Each test runs on a SQLite file and on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from confluent_kafka.serialization import MessageField, SerializationContext

from aigc_hub import tenancy
from aigc_hub.bootstrap import Hub
from aigc_hub.interfaces.http.app import create_app
from aigc_hub.interfaces.http.schema_registry import PREFIX
from aigc_hub.messaging.memory import MemoryBroker
from aigc_hub.schemas.avro_registry import tables as registry_tables
from tests.support.confluent_registry import (
    AvroDeserializer,
    AvroSerializer,
    Schema,
    SchemaRegistryClient,
    SchemaRegistryError,
)
from tests.support.hubs import hub_for
from tests.support.served import serve

AVSC = Path(__file__).resolve().parents[1] / "fixtures" / "avro" / "document-uploaded.avsc"
TOPIC = "documents.uploaded"
SUBJECT = f"{TOPIC}-value"  # the serializers' default (TopicNameStrategy)
#: seed 003 §9's schema as written (v2.1, with ``aiAnalysisRequired``, default true)
V21: dict[str, Any] = json.loads(AVSC.read_text())


def without(schema: dict[str, Any], field: str) -> dict[str, Any]:
    """``schema`` without the field ``field``."""
    copied = copy.deepcopy(schema)
    copied["fields"] = [f for f in copied["fields"] if f["name"] != field]
    return copied


def with_field(schema: dict[str, Any], field: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with ``field`` appended."""
    copied = copy.deepcopy(schema)
    copied["fields"].append(field)
    return copied


def retyped(schema: dict[str, Any], name: str, type_: object) -> dict[str, Any]:
    """``schema`` with field ``name`` of type ``type_``."""
    copied = copy.deepcopy(schema)
    for field in copied["fields"]:
        if field["name"] == name:
            field["type"] = type_
    return copied


V20 = without(V21, "aiAnalysisRequired")
RECORD_V20: dict[str, Any] = {
    "eventId": "evt-1",
    "taskId": "task-1",
    "documentId": "doc-1",
    "knowledgeBaseId": "kb-1",
    "storageKey": "docs/doc-1.pdf",
    "fileName": "合同.pdf",
    "fileSizeBytes": 1_048_576,
    "mimeType": "application/pdf",
    "userId": "user-1",
    "priority": "high",
    "eventTimestamp": 1_764_633_600_000,
    "retryCount": 0,
    "traceId": None,
}


def avro(schema: dict[str, Any]) -> Schema:
    """A Confluent ``Schema`` of ``schema``'s JSON text."""
    return Schema(json.dumps(schema, ensure_ascii=False), "AVRO")


@dataclass
class Served:
    """The registry's URL (as clients take it) and keys of each kind."""

    url: str
    admin: str
    tenant: str
    hub: Hub

    def client(self, key: str | None = None, *, bearer: bool = False) -> SchemaRegistryClient:
        """confluent-kafka's client with ``key`` (the admin's unless given): basic auth, or
        a static bearer token; no retries, so a refusal is one request."""
        conf: dict[str, Any] = {"url": self.url, "max.retries": 0}
        if bearer:
            conf["bearer.auth.credentials.source"] = "STATIC_TOKEN"
            conf["bearer.auth.token"] = key
            conf["bearer.auth.logical.cluster"] = "hub"
        elif key != "":
            conf["basic.auth.user.info"] = f"producer:{key or self.admin}"
        return SchemaRegistryClient(conf)

    def http(self, key: str | None = None) -> httpx.AsyncClient:
        """httpx on the registry with ``key`` as a bearer token (the admin's unless given)."""
        headers = {"Authorization": f"Bearer {key or self.admin}"}
        return httpx.AsyncClient(base_url=self.url, headers=headers)


@pytest.fixture
async def served(db_url: str) -> AsyncIterator[Served]:
    async with hub_for(db_url, MemoryBroker(), []) as hub:
        admin = await tenancy.create_admin_key(hub.engine)
        _, tenant = await tenancy.create_tenant(hub.engine, "documents")
        async with serve(create_app(hub)) as base:
            yield Served(base + PREFIX, admin, tenant, hub)


async def run(call: Callable[..., Any], *args: Any) -> Any:
    """A blocking client call, off the loop the server answers on."""
    return await asyncio.to_thread(call, *args)


async def refused(call: Callable[..., Any], *args: Any) -> SchemaRegistryError:
    """The registry error a blocking client call raises."""
    with pytest.raises(SchemaRegistryError) as caught:
        await asyncio.to_thread(call, *args)
    return caught.value


async def count(hub: Hub, table: sa.Table) -> int:
    async with hub.engine.connect() as conn:
        return int(await conn.scalar(sa.select(sa.func.count()).select_from(table)) or 0)


# --- seed 003 §9 ----------------------------------------------------------------------------


async def test_v2_0_then_v2_1_register_under_backward_and_v2_1_reads_a_v2_0_record_with_the_default(
    served: Served,
) -> None:
    ctx = SerializationContext(TOPIC, MessageField.VALUE)
    with served.client() as producer_registry, served.client(served.tenant) as consumer_registry:
        # The v2.0 producer registers its schema itself (auto.register.schemas).
        serializer = AvroSerializer(producer_registry, json.dumps(V20, ensure_ascii=False))
        written = await run(serializer, RECORD_V20, ctx)
        assert written[0] == 0  # Confluent framing: magic byte, then the 4-byte schema id
        v20_id = int.from_bytes(written[1:5], "big")

        assert await run(producer_registry.get_compatibility) == "BACKWARD"
        v21_id = await run(producer_registry.register_schema, SUBJECT, avro(V21))
        assert v21_id != v20_id
        assert await run(producer_registry.get_versions, SUBJECT) == [1, 2]
        latest = await run(consumer_registry.get_latest_version, SUBJECT)
        assert (latest.version, latest.schema_id) == (2, v21_id)
        assert json.loads(latest.schema.schema_str) == V21

        # A v2.1 consumer (a tenant key reads) decodes the v2.0 record: the default fills in.
        deserializer = AvroDeserializer(consumer_registry, json.dumps(V21, ensure_ascii=False))
        read = await run(deserializer, written, ctx)
        assert read == {**RECORD_V20, "aiAnalysisRequired": True}

        # And a v2.1 record goes out under the v2.1 id.
        v21_writer = AvroSerializer(
            producer_registry,
            json.dumps(V21, ensure_ascii=False),
            conf={"auto.register.schemas": False},
        )
        record_v21 = {**RECORD_V20, "aiAnalysisRequired": False}
        written_v21 = await run(v21_writer, record_v21, ctx)
        assert int.from_bytes(written_v21[1:5], "big") == v21_id
        assert await run(deserializer, written_v21, ctx) == record_v21


@pytest.mark.parametrize(
    "change",
    [
        with_field(V21, {"name": "ocrLanguage", "type": "string"}),  # new field, no default
        retyped(V21, "fileSizeBytes", "string"),  # a long read as a string
    ],
    ids=["field-without-default", "type-change"],
)
async def test_an_incompatible_change_is_refused_with_409_and_nothing_is_stored(
    served: Served, change: dict[str, Any]
) -> None:
    with served.client() as registry:
        await run(registry.register_schema, SUBJECT, avro(V20))
        await run(registry.register_schema, SUBJECT, avro(V21))
        schemas = await count(served.hub, registry_tables.schema_registry_schemas)

        error = await refused(registry.register_schema, SUBJECT, avro(change))
        assert (error.http_status_code, error.error_code) == (409, 409)
        assert "incompatible" in error.error_message
        assert await run(registry.get_versions, SUBJECT) == [1, 2]
        assert await count(served.hub, registry_tables.schema_registry_schemas) == schemas
        assert await run(registry.test_compatibility, SUBJECT, avro(change)) is False
        assert await run(registry.test_compatibility, SUBJECT, avro(V21)) is True

    async with served.http() as http:
        answer = await http.post(
            f"/compatibility/subjects/{SUBJECT}/versions/latest?verbose=true",
            json={"schema": json.dumps(change)},
        )
    assert answer.headers["content-type"] == "application/vnd.schemaregistry.v1+json"
    body = answer.json()
    assert body["is_compatible"] is False
    assert any("cannot read version 2" in message for message in body["messages"])


# --- identity ---------------------------------------------------------------------------------


async def test_the_same_schema_registered_twice_gets_the_same_id_and_version(
    served: Served,
) -> None:
    # Two clients, so the second registration reaches the server (clients cache ids).
    with served.client() as first, served.client(bearer=True, key=served.admin) as second:
        schema_id = await run(first.register_schema, SUBJECT, avro(V21))
        # Same schema, other spacing and key order: same schema.
        respaced = Schema(json.dumps(V21, indent=4, sort_keys=True), "AVRO")
        assert await run(second.register_schema, SUBJECT, respaced) == schema_id
        assert await run(second.get_versions, SUBJECT) == [1]
        found = await run(second.lookup_schema, SUBJECT, respaced)
        assert (found.schema_id, found.version) == (schema_id, 1)
        # Under another subject: the same id, that subject's first version.
        assert await run(second.register_schema, "other-value", avro(V21)) == schema_id
        pairs = await run(second.get_schema_versions, schema_id)
        assert [(p.subject, p.version) for p in pairs] == [(SUBJECT, 1), ("other-value", 1)]
    assert await count(served.hub, registry_tables.schema_registry_schemas) == 1
