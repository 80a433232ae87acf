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
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from aigc_hub import tenancy
from aigc_hub.bootstrap import Hub
from aigc_hub.core.errors import RetryableError
from aigc_hub.interfaces.http.app import create_app
from aigc_hub.interfaces.http.schema_registry import PREFIX
from aigc_hub.messaging.memory import MemoryBroker
from aigc_hub.pipelines.documents.avro import DOCUMENT_UPLOADED
from aigc_hub.reliability import audit
from aigc_hub.schemas.avro_registry import rows
from aigc_hub.schemas.avro_registry import tables as registry_tables
from tests.support.hubs import hub_for
from tests.support.served import serve

TOPIC = "documents.uploaded"
SUBJECT = f"{TOPIC}-value"  # the serializers' default (TopicNameStrategy)
#: seed 003 §9's schema as written (v2.1, with ``aiAnalysisRequired``, default true)
V21: dict[str, Any] = DOCUMENT_UPLOADED


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


# --- deletes ----------------------------------------------------------------------------------


async def test_soft_delete_hides_a_version_then_permanent_delete_removes_it(served: Served) -> None:
    with served.client() as registry:
        v20_id = await run(registry.register_schema, SUBJECT, avro(V20))
        await run(registry.register_schema, SUBJECT, avro(V21))

        # A permanent delete must follow a soft one.
        error = await refused(registry.delete_version, SUBJECT, 1, True)
        assert (error.http_status_code, error.error_code) == (404, 40407)
        assert await run(registry.delete_version, SUBJECT, 1) == 1
        error = await refused(registry.delete_version, SUBJECT, 1)
        assert error.error_code == 40406  # soft-deleted already
        assert await run(registry.get_versions, SUBJECT) == [2]
        assert await run(registry.get_versions, SUBJECT, True) == [1, 2]
        error = await refused(registry.get_version, SUBJECT, 1)
        assert error.error_code == 40402
        hidden = await run(registry.get_version, SUBJECT, 1, True)
        assert (hidden.version, hidden.schema_id) == (1, v20_id)
        registry.clear_caches()
        # Records written with the id still decode while the version is only soft-deleted.
        assert json.loads((await run(registry.get_schema, v20_id)).schema_str) == V20

        assert await run(registry.delete_version, SUBJECT, 1, True) == 1
        assert await run(registry.get_versions, SUBJECT, True) == [2]

        # The subject: soft, soft again (40404), then permanent.
        await run(registry.set_compatibility, SUBJECT, "FULL")
        error = await refused(registry.delete_subject, SUBJECT, True)
        assert error.error_code == 40405
        assert await run(registry.delete_subject, SUBJECT) == [2]
        assert await run(registry.get_subjects) == []
        assert await run(registry.get_subjects, None, True) == [SUBJECT]
        error = await refused(registry.delete_subject, SUBJECT)
        assert error.error_code == 40404
        assert await run(registry.delete_subject, SUBJECT, True) == [2]
        assert await run(registry.get_subjects, None, True) == []
        error = await refused(registry.get_versions, SUBJECT, True)
        assert error.error_code == 40401
        registry.clear_caches()
        error = await refused(registry.get_schema, v20_id)
        assert (error.http_status_code, error.error_code) == (404, 40403)
        error = await refused(registry.get_compatibility, SUBJECT)
        assert error.error_code == 40408  # its level went with it

        # Registered again: the same id as before, and the subject starts at version 1.
        assert await run(registry.register_schema, SUBJECT, avro(V20)) == v20_id
        assert await run(registry.get_versions, SUBJECT) == [1]

    entries = await audit.recent(served.hub.engine, limit=50)
    actions = [e.action for e in reversed(entries) if e.target == f"subject:{SUBJECT}"]
    assert actions == [
        "schema.register",
        "schema.register",
        "schema.delete_version",
        "schema.purge_version",
        "schema.config",
        "schema.delete_subject",
        "schema.purge_subject",
        "schema.register",
    ]
    assert all(e.actor.startswith("admin:") for e in entries)


# --- compatibility levels ---------------------------------------------------------------------


async def test_a_subject_level_overrides_the_registry_level_until_deleted(served: Served) -> None:
    breaking = with_field(V21, {"name": "ocrLanguage", "type": "string"})
    with served.client() as registry:
        assert await run(registry.get_compatibility) == "BACKWARD"
        error = await refused(registry.get_compatibility, SUBJECT)
        assert error.error_code == 40408
        # A subject may get its own level before it has a version.
        assert await run(registry.set_compatibility, SUBJECT, "NONE") == {"compatibility": "NONE"}
        assert await run(registry.get_compatibility, SUBJECT) == "NONE"
        await run(registry.register_schema, SUBJECT, avro(V21))
        await run(registry.register_schema, SUBJECT, avro(breaking))  # NONE: anything goes
        assert await run(registry.get_versions, SUBJECT) == [1, 2]

        # Other subjects keep the registry's level.
        await run(registry.register_schema, "other-value", avro(V21))
        error = await refused(registry.register_schema, "other-value", avro(breaking))
        assert error.error_code == 409
        await run(registry.set_compatibility, None, "FORWARD")
        assert await run(registry.get_compatibility) == "FORWARD"
        # FORWARD: old readers ignore the new field, so it may come without a default.
        await run(registry.register_schema, "other-value", avro(breaking))

        error = await refused(registry.set_compatibility, SUBJECT, "SIDEWAYS")
        assert (error.http_status_code, error.error_code) == (422, 42203)
        assert (await run(registry.delete_config, SUBJECT)).compatibility_level.value == "NONE"
        error = await refused(registry.delete_config, SUBJECT)
        assert error.error_code == 40401  # no level of its own any more

    async with served.http() as http:
        other = await http.get(f"/config/{SUBJECT}?defaultToGlobal=true")
        assert other.json() == {"compatibilityLevel": "FORWARD"}


@pytest.mark.parametrize(
    ("level", "accepted"),
    [("BACKWARD", True), ("BACKWARD_TRANSITIVE", False)],
)
async def test_a_transitive_level_checks_every_live_version(
    served: Served, level: str, accepted: bool
) -> None:
    # v1 has a string field; v2 drops it; v3 brings it back as a long with a default:
    # v3 reads v2's records (the default fills in) but not v1's (a string is not a long).
    v1 = with_field(V21, {"name": "ocrLanguage", "type": "string"})
    v3 = with_field(V21, {"name": "ocrLanguage", "type": "long", "default": 0})
    with served.client() as registry:
        await run(registry.set_compatibility, SUBJECT, level)
        await run(registry.register_schema, SUBJECT, avro(v1))
        await run(registry.register_schema, SUBJECT, avro(V21))
        if accepted:
            await run(registry.register_schema, SUBJECT, avro(v3))
            assert await run(registry.get_versions, SUBJECT) == [1, 2, 3]
        else:
            error = await refused(registry.register_schema, SUBJECT, avro(v3))
            assert error.error_code == 409
            assert "version 1" in error.error_message
            assert await run(registry.test_compatibility_all_versions, SUBJECT, avro(v3)) is False
            # Against version 2 alone it would pass.
            assert await run(registry.test_compatibility, SUBJECT, avro(v3), 2) is True


# --- what is not there ------------------------------------------------------------------------


async def test_missing_subjects_versions_and_ids_answer_confluent_codes(served: Served) -> None:
    with served.client() as registry:
        await run(registry.register_schema, SUBJECT, avro(V21))
        for call, args, status, code in [
            (registry.get_latest_version, ("nobody-value",), 404, 40401),
            (registry.get_versions, ("nobody-value",), 404, 40401),
            (registry.get_version, (SUBJECT, 7), 404, 40402),
            (registry.get_schema, (987654,), 404, 40403),
            (registry.lookup_schema, (SUBJECT, avro(V20)), 404, 40403),
            (registry.lookup_schema, ("nobody-value", avro(V21)), 404, 40401),
            (registry.delete_version, (SUBJECT, 7), 404, 40402),
            (registry.delete_subject, ("nobody-value",), 404, 40401),
            (registry.test_compatibility, ("nobody-value", avro(V21)), 404, 40401),
        ]:
            error = await refused(call, *args)
            assert (error.http_status_code, error.error_code) == (status, code), call
    async with served.http() as http:
        for path, status, code in [
            (f"/subjects/{SUBJECT}/versions/abc", 422, 42202),
            (f"/subjects/{SUBJECT}/versions/0", 422, 42202),
            (f"/subjects/{SUBJECT}/versions/2147483648", 422, 42202),
            ("/schemas/ids/not-a-number", 404, 40403),
            ("/mode", 404, 404),  # not served
        ]:
            answer = await http.get(path)
            assert answer.status_code == status, path
            assert answer.json()["error_code"] == code, path
            assert answer.headers["content-type"] == "application/vnd.schemaregistry.v1+json"
        latest = await http.get(f"/subjects/{SUBJECT}/versions/-1/schema")
        assert json.loads(latest.text) == V21
        assert (await http.get("/schemas/types")).json() == ["AVRO"]
        subjects = await http.get("/schemas/ids/1/subjects")
        assert subjects.json() == [SUBJECT]
        # An empty subject accepts anything against "all versions".
        verdict = await http.post(
            "/compatibility/subjects/nobody-value/versions", json={"schema": json.dumps(V21)}
        )
        assert verdict.json() == {"is_compatible": True}


# --- what is refused --------------------------------------------------------------------------


async def test_schemas_the_registry_cannot_keep_are_422_and_bad_bodies_400_or_415(
    served: Served,
) -> None:
    bad_default = with_field(V21, {"name": "pages", "type": "int", "default": "many"})
    async with served.http() as http:
        path = f"/subjects/{SUBJECT}/versions"
        for body, code in [
            ({"schema": "{not json"}, 42201),
            ({"schema": json.dumps(bad_default)}, 42201),
            ({"schema": '{"type": "record", "name": "R"}'}, 42201),
            ({"schema": "syntax = 'proto3';", "schemaType": "PROTOBUF"}, 42201),
            ({"schema": json.dumps(V21), "references": [{"name": "x", "subject": "s"}]}, 42201),
            ({"schema": json.dumps(V21), "ruleSet": {"domainRules": []}}, 42201),
            ({"schema": json.dumps(V21), "id": 42}, 42205),
            ({}, 42201),
        ]:
            answer = await http.post(path, json=body)
            assert (answer.status_code, answer.json()["error_code"]) == (422, code), body
        assert (await http.post(path, content=b"{", headers=_json())).status_code == 400
        not_object = await http.post(path, content=b"[1]", headers=_json())
        assert (not_object.status_code, not_object.json()["error_code"]) == (422, 422)
        text = await http.post(path, content=b"x", headers={"Content-Type": "text/plain"})
        assert (text.status_code, text.json()["error_code"]) == (415, 415)
        long_name = await http.post("/subjects/" + "s" * 256 + "/versions", json=_v21())
        assert long_name.json()["error_code"] == 42208
        control = await http.post("/subjects/bad%01name/versions", json=_v21())
        assert control.json()["error_code"] == 42208
        bad_level = await http.put("/config", json={"compatibility": 3})
        assert bad_level.json()["error_code"] == 42203
    assert await count(served.hub, registry_tables.schema_registry_schemas) == 0


def _json() -> dict[str, str]:
    return {"Content-Type": "application/vnd.schemaregistry.v1+json"}


def _v21() -> dict[str, str]:
    return {"schema": json.dumps(V21)}


# --- keys -------------------------------------------------------------------------------------


async def test_a_tenant_key_reads_but_may_not_change_the_registry(served: Served) -> None:
    with served.client() as admin, served.client(served.tenant) as tenant:
        schema_id = await run(admin.register_schema, SUBJECT, avro(V21))
        assert await run(tenant.get_subjects) == [SUBJECT]
        assert json.loads((await run(tenant.get_schema, schema_id)).schema_str) == V21
        for call, args in [
            (tenant.register_schema, (SUBJECT, avro(V20))),
            (tenant.delete_subject, (SUBJECT,)),
            (tenant.delete_version, (SUBJECT, 1)),
            (tenant.set_compatibility, (None, "NONE")),
            (tenant.delete_config, (SUBJECT,)),
        ]:
            error = await refused(call, *args)
            assert (error.http_status_code, error.error_code) == (403, 40301), call
        assert await run(admin.get_versions, SUBJECT) == [1]
        assert await run(admin.get_compatibility) == "BACKWARD"
    with served.client(served.tenant, bearer=True) as bearer:
        assert await run(bearer.get_subjects) == [SUBJECT]  # the key as a bearer token


async def test_no_key_or_an_unknown_one_is_401(served: Served) -> None:
    revoked = await tenancy.create_admin_key(served.hub.engine)
    principal = await tenancy.authenticate(served.hub.engine, revoked)
    assert principal is not None
    await tenancy.revoke(served.hub.engine, principal.key_id, actor="test")
    with (
        served.client("") as anonymous,
        served.client("ak_not-a-real-key") as wrong,
        served.client(revoked) as revoked_client,
    ):
        for client in (anonymous, wrong, revoked_client):
            error = await refused(client.get_subjects)
            assert (error.http_status_code, error.error_code) == (401, 401)
            error = await refused(client.register_schema, SUBJECT, avro(V21))
            assert error.http_status_code == 401
    async with httpx.AsyncClient(base_url=served.url) as http:
        answer = await http.get("/subjects", auth=("producer", ""))
        assert answer.status_code == 401
        assert "Basic" in answer.headers["www-authenticate"]
        malformed = await http.get("/subjects", headers={"Authorization": "Basic %%%"})
        assert malformed.json()["error_code"] == 401


# --- races ------------------------------------------------------------------------------------


async def test_concurrent_registrations_under_one_subject_get_distinct_versions(
    served: Served,
) -> None:
    # Each adds its own optional field, so any order is backward compatible.
    schemas = [
        with_field(V21, {"name": f"extra{n}", "type": "int", "default": n}) for n in range(6)
    ]
    async with served.http() as http:
        answers = await asyncio.gather(
            *(
                http.post(f"/subjects/{SUBJECT}/versions", json={"schema": json.dumps(s)})
                for s in [*schemas, schemas[0]]  # the first one twice
            )
        )
        assert [a.status_code for a in answers] == [200] * 7, [a.text for a in answers]
        ids = [a.json()["id"] for a in answers]
        assert ids[-1] == ids[0] and len(set(ids)) == 6
        versions = (await http.get(f"/subjects/{SUBJECT}/versions")).json()
        assert versions == [1, 2, 3, 4, 5, 6]

        # One new schema under several subjects at once: one id for all of them.
        fresh = with_field(V21, {"name": "fresh", "type": "int", "default": 0})
        answers = await asyncio.gather(
            *(
                http.post(f"/subjects/s{n}-value/versions", json={"schema": json.dumps(fresh)})
                for n in range(4)
            )
        )
    assert len({a.json()["id"] for a in answers}) == 1
    assert await count(served.hub, registry_tables.schema_registry_schemas) == 7


async def test_a_write_that_keeps_losing_races_gives_up_retryable(db: AsyncEngine) -> None:
    attempts = 0

    async def collides(conn: AsyncConnection) -> None:
        nonlocal attempts
        attempts += 1
        raise IntegrityError("INSERT …", {}, Exception("duplicate key"))

    with pytest.raises(RetryableError, match="kept colliding"):
        await rows.write(db, SUBJECT, collides)
    assert attempts == rows.WRITE_ATTEMPTS
