"""The envelope: bytes round trip, new/derive, immutability, and one named field per bad input."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pydantic
import pytest

from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import EnvelopeError, HubError, PermanentError

EVENT_ID = "0190a6b2-7c4e-7d3a-9f10-2b3c4d5e6f70"


def _valid() -> dict[str, Any]:
    """A complete, valid envelope as a JSON-ready dict (each bad case breaks one field)."""
    return {
        "event_id": EVENT_ID,
        "event_type": "avcc.apply.created",
        "schema_version": 2,
        "timestamp": 1_767_225_600_123,
        "source": "avcc-api",
        "tenant_id": "tenant-7",
        "key": "apply-42",
        "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
        "correlation_id": "corr-1",
        "causation_id": None,
        "attempt": 3,
        "payload": {"title": "生成一张猫的图片", "n": 1, "tags": ["猫", "cat"]},
    }


def _bytes_with(**changes: Any) -> bytes:
    data = _valid()
    data.update(changes)
    return json.dumps(data, ensure_ascii=False).encode()


def _bytes_without(field: str) -> bytes:
    data = _valid()
    del data[field]
    return json.dumps(data).encode()


# --- round trip -------------------------------------------------------------------------------


def test_valid_bytes_parse_into_every_field() -> None:
    env = Envelope.from_bytes(_bytes_with())

    assert env.model_dump() == _valid()


def test_round_trip_through_bytes_keeps_every_field_including_chinese_text() -> None:
    env = Envelope.from_bytes(_bytes_with())

    data = env.to_bytes()
    again = Envelope.from_bytes(data)

    assert again == env
    assert again.payload["title"] == "生成一张猫的图片"
    assert "生成一张猫的图片".encode() in data  # UTF-8 JSON, not \\u escapes
    assert json.loads(data) == _valid()


def test_from_bytes_accepts_str() -> None:
    assert Envelope.from_bytes(_bytes_with().decode()).event_id == EVENT_ID


def test_with_attempt_copies_with_another_attempt_only() -> None:
    env = Envelope.from_bytes(_bytes_with())

    copy = env.with_attempt(0)

    assert copy.attempt == 0
    assert env.attempt == 3
    assert copy.model_dump(exclude={"attempt"}) == env.model_dump(exclude={"attempt"})


# --- new / derive -----------------------------------------------------------------------------


def test_new_fills_a_uuid7_id_and_an_epoch_ms_timestamp() -> None:
    before = time.time_ns() // 1_000_000
    env = Envelope.new("avcc.apply.created", {"a": 1}, key="apply-1", source="api")
    after = time.time_ns() // 1_000_000

    event_id = uuid.UUID(env.event_id)
    assert event_id.version == 7
    assert str(event_id) == env.event_id
    assert before <= env.timestamp <= after
    assert before <= int(event_id.hex[:12], 16) <= after  # the id's own 48-bit ms clock
    assert env.schema_version == 1
    assert env.attempt == 0
    assert (env.tenant_id, env.trace_id, env.correlation_id, env.causation_id) == (None,) * 4


def test_new_gives_every_envelope_its_own_id() -> None:
    made = [Envelope.new("a.b", {}, key="k", source="s").event_id for _ in range(200)]

    assert len(set(made)) == 200


def test_new_keeps_an_explicit_timestamp() -> None:
    env = Envelope.new("a.b", {}, key="k", source="s", timestamp=1_000)

    assert env.timestamp == 1_000


def test_new_rejects_bad_fields_with_envelope_error() -> None:
    with pytest.raises(EnvelopeError) as info:
        Envelope.new("NotDotted", {}, key="k", source="s")

    assert info.value.field == "event_type"


def test_derive_carries_tenant_trace_and_correlation_and_sets_causation() -> None:
    parent = Envelope.new(
        "avcc.apply.created",
        {"a": 1},
        key="apply-1",
        source="api",
        tenant_id="tenant-7",
        trace_id="trace-9",
        correlation_id="corr-5",
        causation_id="someone-else",
    )

    child = parent.derive("review.task.finished", {"ok": True})

    assert child.tenant_id == "tenant-7"
    assert child.trace_id == "trace-9"
    assert child.correlation_id == "corr-5"
    assert child.causation_id == parent.event_id
    assert child.event_id != parent.event_id
    assert uuid.UUID(child.event_id).version == 7
    assert child.event_type == "review.task.finished"
    assert child.payload == {"ok": True}
    assert (child.key, child.source) == ("apply-1", "api")


def test_derive_may_override_key_and_source() -> None:
    parent = Envelope.new("a.b", {}, key="k1", source="s1", tenant_id="t")

    child = parent.derive("a.c", {}, key="k2", source="s2")

    assert (child.key, child.source, child.tenant_id) == ("k2", "s2", "t")


# --- immutability ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("event_id", "01a1f018-88e4-4131-9a0f-2a38b3431c71"),
        ("attempt", 9),
        ("payload", {}),
        ("key", "other"),
    ],
)
def test_envelope_is_frozen(field: str, value: Any) -> None:
    env = Envelope.from_bytes(_bytes_with())

    with pytest.raises(pydantic.ValidationError, match="frozen"):
        setattr(env, field, value)

    assert env == Envelope.from_bytes(_bytes_with())


# --- malformed input -------------------------------------------------------------------------

MALFORMED: list[Any] = [
    pytest.param(b"{not json", "$", id="not-json"),
    pytest.param(b"", "$", id="empty-bytes"),
    pytest.param(b"[1, 2, 3]", "$", id="array-not-object"),
    pytest.param(b'"a string"', "$", id="string-not-object"),
    pytest.param(_bytes_without("event_id"), "event_id", id="missing-event-id"),
    pytest.param(_bytes_with(event_id="not-a-uuid"), "event_id", id="event-id-not-uuid"),
    pytest.param(_bytes_with(event_type="Avcc.Apply"), "event_type", id="event-type-upper"),
    pytest.param(_bytes_with(event_type="avcc"), "event_type", id="event-type-not-dotted"),
    pytest.param(_bytes_with(event_type="avcc..apply"), "event_type", id="event-type-empty-word"),
    pytest.param(_bytes_with(schema_version=0), "schema_version", id="schema-version-0"),
    pytest.param(_bytes_with(timestamp=-1), "timestamp", id="negative-timestamp"),
    pytest.param(_bytes_without("timestamp"), "timestamp", id="missing-timestamp"),
    pytest.param(_bytes_with(key=""), "key", id="empty-key"),
    pytest.param(_bytes_with(source=""), "source", id="empty-source"),
    pytest.param(_bytes_with(attempt=-1), "attempt", id="negative-attempt"),
    pytest.param(_bytes_with(surprise=1), "surprise", id="unknown-extra-field"),
    pytest.param(_bytes_with(payload=[1, 2]), "payload", id="payload-list"),
    pytest.param(_bytes_with(payload="text"), "payload", id="payload-string"),
]


@pytest.mark.parametrize(("data", "field"), MALFORMED)
def test_from_bytes_names_the_bad_field(data: bytes, field: str) -> None:
    with pytest.raises(EnvelopeError) as info:
        Envelope.from_bytes(data)

    assert info.value.field == field
    assert info.value.problem
    assert repr(field) in str(info.value)


def test_not_json_says_so() -> None:
    with pytest.raises(EnvelopeError, match="not valid JSON"):
        Envelope.from_bytes(b"\xff\xfe garbage")


def test_envelope_error_is_a_permanent_hub_error() -> None:
    assert issubclass(EnvelopeError, PermanentError)
    assert issubclass(EnvelopeError, HubError)
    with pytest.raises(PermanentError):
        Envelope.from_bytes(b"nope")
