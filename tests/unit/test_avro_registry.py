"""The schema registry's pure parts: schema identity, the seven levels, names and version
ids, keys in headers, the Confluent error shape, and the doc's list of endpoints."""

from __future__ import annotations

import base64
import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import APIRouter, FastAPI, HTTPException

from aigc_hub.core.errors import RetryableError
from aigc_hub.interfaces.http import schema_registry, schema_registry_wire
from aigc_hub.schemas.avro_registry import errors, parsing
from aigc_hub.schemas.avro_registry.compatibility import Compatibility, problems
from aigc_hub.schemas.avro_registry.records import check_subject, parse_version

DOCS = Path(__file__).resolve().parents[2] / "docs"

BASE: dict[str, Any] = {
    "type": "record",
    "name": "DocumentUploadedEvent",
    "namespace": "com.laozhang.kafka.event",
    "fields": [
        {"name": "documentId", "type": "string"},
        {"name": "pages", "type": "int"},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}


def variant(**changes: Any) -> str:
    """BASE's JSON text with fields added (``add``), dropped (``drop``) or retyped."""
    schema = json.loads(json.dumps(BASE))
    schema["fields"] = [f for f in schema["fields"] if f["name"] != changes.get("drop")]
    for field in schema["fields"]:
        if field["name"] in changes.get("retype", {}):
            field["type"] = changes["retype"][field["name"]]
    schema["fields"] += changes.get("add", [])
    return json.dumps(schema)


# --- identity ---------------------------------------------------------------------------------


def test_spacing_key_order_and_spelling_of_names_do_not_change_identity() -> None:
    original = parsing.parse(json.dumps(BASE))
    respaced = parsing.parse(json.dumps(BASE, indent=2, sort_keys=True))
    full_name = dict(BASE, name="com.laozhang.kafka.event.DocumentUploadedEvent")
    del full_name["namespace"]
    boxed = json.loads(json.dumps(BASE))
    boxed["fields"][0]["type"] = {"type": "string"}
    for same in (respaced, parsing.parse(json.dumps(full_name)), parsing.parse(json.dumps(boxed))):
        assert same.fingerprint == original.fingerprint
    # What is stored is the text as sent (compact), unless normalized.
    assert respaced.text == json.dumps(BASE, sort_keys=True, separators=(",", ":"))
    normal = parsing.parse(json.dumps(boxed), normalize=True)
    assert json.loads(normal.text)["fields"][0]["type"] == "string"


@pytest.mark.parametrize(
    "change",
    [
        {"default": 0},  # a default is what readers fill: never the same schema
        {"doc": "number of pages"},
        {"aliases": ["pageCount"]},
    ],
)
def test_a_changed_default_doc_or_alias_is_another_schema(change: dict[str, Any]) -> None:
    changed = json.loads(json.dumps(BASE))
    changed["fields"][1].update(change)
    assert parsing.parse(json.dumps(changed)).fingerprint != parsing.parse(variant()).fingerprint


@pytest.mark.parametrize(
    ("text", "kwargs", "why"),
    [
        ("{not json", {}, "not JSON"),
        ("", {}, "non-empty"),
        (None, {}, "non-empty"),
        ('{"type": "record", "name": "R"}', {}, "fields"),  # both parsers refuse
        (  # fastavro refuses, the avro package would let it pass
            '{"type":"record","name":"R","fields":[{"name":"a","type":"boolean","default":"yes"}]}',
            {},
            "Default value",
        ),
        (  # the avro package refuses, fastavro would let it pass
            '{"type":"record","name":"R","fields":[{"name":"a","type":"int"},'
            '{"name":"a","type":"int"}]}',
            {},
            "already in use",
        ),
        ('{"type": "fixed", "name": "F"}', {}, "missing attribute 'size'"),
        ('"string"', {"schema_type": "PROTOBUF"}, "AVRO only"),
        ('"string"', {"schema_type": 7}, "AVRO only"),
        ('"string"', {"references": [{"name": "x"}]}, "references"),
    ],
)
def test_schemas_the_registry_cannot_keep_are_invalid(
    text: object, kwargs: dict[str, Any], why: str
) -> None:
    with pytest.raises(errors.InvalidSchema, match=why) as caught:
        parsing.parse(text, **kwargs)
    assert caught.value.error_code == 42201 and caught.value.http_status == 422


def test_avro_is_the_default_type_in_any_case() -> None:
    for schema_type in (None, "AVRO", "avro"):
        assert parsing.parse('"long"', schema_type=schema_type).text == '"long"'


# --- compatibility ----------------------------------------------------------------------------

ADD_WITH_DEFAULT = variant(add=[{"name": "ocr", "type": "boolean", "default": True}])
ADD_WITHOUT_DEFAULT = variant(add=[{"name": "ocr", "type": "boolean"}])
DROP_WITH_DEFAULT = variant(drop="note")
DROP_WITHOUT_DEFAULT = variant(drop="pages")
WIDEN = variant(retype={"pages": "long"})  # int -> long: a reader may promote
NARROW = variant(retype={"pages": "string"})

# level: which changes from BASE pass (a change is judged against one older version here)
EXPECTED: dict[Compatibility, set[str]] = {
    Compatibility.NONE: {"add+d", "add", "drop+d", "drop", "widen", "narrow"},
    Compatibility.BACKWARD: {"add+d", "drop+d", "drop", "widen"},
    Compatibility.BACKWARD_TRANSITIVE: {"add+d", "drop+d", "drop", "widen"},
    Compatibility.FORWARD: {"add+d", "add", "drop+d"},
    Compatibility.FORWARD_TRANSITIVE: {"add+d", "add", "drop+d"},
    Compatibility.FULL: {"add+d", "drop+d"},
    Compatibility.FULL_TRANSITIVE: {"add+d", "drop+d"},
}
CHANGES = {
    "add+d": ADD_WITH_DEFAULT,
    "add": ADD_WITHOUT_DEFAULT,
    "drop+d": DROP_WITH_DEFAULT,
    "drop": DROP_WITHOUT_DEFAULT,
    "widen": WIDEN,
    "narrow": NARROW,
}


@pytest.mark.parametrize("level", list(Compatibility))
def test_each_level_accepts_exactly_its_changes(level: Compatibility) -> None:
    old = parsing.parse(variant()).parsed
    passed = {
        name
        for name, text in CHANGES.items()
        if not problems(level, parsing.parse(text).parsed, [(1, old)])
    }
    assert passed == EXPECTED[level]


def test_a_problem_names_the_version_the_direction_and_the_field() -> None:
    old = parsing.parse(variant()).parsed
    [backward, forward] = problems(Compatibility.FULL, parsing.parse(NARROW).parsed, [(3, old)])
    assert backward.startswith("the new schema cannot read version 3: type_mismatch")
    assert "/fields/1/type" in backward
    assert forward.startswith("version 3 cannot read the new schema")


def test_plain_levels_look_at_the_newest_version_transitive_ones_at_all() -> None:
    live = [1, 2, 3]
    assert Compatibility.BACKWARD.compared_with(live) == [3]
    assert Compatibility.FULL_TRANSITIVE.compared_with(live) == [1, 2, 3]
    assert Compatibility.NONE.compared_with(live) == []
    assert Compatibility.FORWARD.compared_with([]) == []


def test_levels_parse_in_any_case_and_refuse_anything_else() -> None:
    assert Compatibility.parse(" full_transitive ") is Compatibility.FULL_TRANSITIVE
    for bad in ("SIDEWAYS", "", None, 3):
        with pytest.raises(errors.InvalidCompatibility) as caught:
            Compatibility.parse(bad)
        assert caught.value.error_code == 42203


# --- names and versions -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1", 1), ("latest", None), ("LATEST", None), ("-1", None), ("2147483647", 2**31 - 1)],
)
def test_version_ids(text: str, expected: int | None) -> None:
    assert parse_version(text) == expected


@pytest.mark.parametrize("text", ["0", "-2", "2147483648", "abc", "1.5", ""])
def test_invalid_version_ids_are_42202(text: str) -> None:
    with pytest.raises(errors.InvalidVersion) as caught:
        parse_version(text)
    assert caught.value.http_status == 422


@pytest.mark.parametrize(
    ("subject", "why"),
    [("", "empty"), (" ", "empty"), ("s" * 256, "longer"), ("a\x00b", "control")],
)
def test_invalid_subjects_are_42208(subject: str, why: str) -> None:
    with pytest.raises(errors.InvalidSubject, match=why) as caught:
        check_subject(subject)
    assert caught.value.error_code == 42208


def test_subject_names_may_hold_any_printable_text() -> None:
    for subject in ("documents.uploaded-value", "com.example.Doc", ":.ctx:文档-value", "s" * 255):
        assert check_subject(subject) == subject


def test_http_status_is_the_codes_first_three_digits() -> None:
    assert errors.SubjectNotFound("s").http_status == 404
    assert errors.IncompatibleSchema("s", "BACKWARD", ["x"]).http_status == 409
    assert errors.OperationNotPermitted("id", "no").http_status == 422


# --- keys -------------------------------------------------------------------------------------


def _basic(user_info: str) -> str:
    return "Basic " + base64.b64encode(user_info.encode()).decode()


@pytest.mark.parametrize(
    ("header", "key"),
    [
        ("Bearer ak_one", "ak_one"),
        ("bearer   ak_one ", "ak_one"),
        (_basic("producer:ak_two"), "ak_two"),
        (_basic(":ak_two"), "ak_two"),
        (_basic("producer:ak:with:colons"), "ak:with:colons"),
        (_basic("producer"), None),  # no password
        (_basic("producer:"), None),
        ("Basic %%%", None),  # not base64
        ("Basic " + base64.b64encode(b"\xff:\xfe").decode(), None),  # not UTF-8
        ("Bearer", None),
        ("Digest abc", None),
        ("", None),
    ],
)
def test_the_key_is_a_bearer_token_or_the_basic_auth_password(header: str, key: str | None) -> None:
    assert schema_registry_wire.presented_key(header) == key


# --- the error shape --------------------------------------------------------------------------


async def test_every_failure_of_a_route_is_answered_in_confluent_shape(
    caplog: pytest.LogCaptureFixture,
) -> None:
    router = APIRouter(route_class=schema_registry_wire.ConfluentRoute)

    @router.get("/retryable")
    async def retryable() -> None:
        raise RetryableError("the database is busy")

    @router.get("/bug")
    async def bug() -> None:
        raise RuntimeError("secret internals")

    @router.get("/http")
    async def http() -> None:
        raise HTTPException(405, "Method Not Allowed")

    @router.get("/typed/{n}")
    async def typed(n: int) -> None:
        return None

    app = FastAPI()
    app.include_router(router)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://registry.test") as client:
        with caplog.at_level(logging.ERROR, logger=schema_registry_wire.__name__):
            answers = {path: await client.get(path) for path in ("/retryable", "/bug", "/http")}
        typed_answer = await client.get("/typed/x")
    assert answers["/retryable"].status_code == 500
    assert answers["/retryable"].json()["error_code"] == 50001
    assert answers["/bug"].json() == {"error_code": 500, "message": "Internal Server Error"}
    assert "secret internals" in caplog.text  # logged, never shown
    assert answers["/http"].status_code == 405 and answers["/http"].json()["error_code"] == 405
    assert typed_answer.status_code == 422 and typed_answer.json()["error_code"] == 422
    for answer in (*answers.values(), typed_answer):
        assert answer.headers["content-type"] == schema_registry_wire.MEDIA_TYPE


# --- the doc ----------------------------------------------------------------------------------


def test_the_doc_lists_every_endpoint_served() -> None:
    text = (DOCS / "schema-registry.md").read_text()
    served = 0
    for route in schema_registry.router.routes:
        path = getattr(route, "path", "")
        if "{path:path}" in path:
            continue  # the catch-all 404
        path = path.replace("{schema_id}", "{id}")
        for method in sorted(getattr(route, "methods", ())):
            assert f"`{method} {path}`" in text, (method, path)
            served += 1
    assert served == 21
