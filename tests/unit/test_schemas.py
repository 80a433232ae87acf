"""Schema registry, compatibility rule and JSON Schema export."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pydantic
import pytest

from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import PermanentError, SchemaError
from aigc_hub.pipeline import EventSpec, Pipeline
from aigc_hub.schemas import compat, export
from aigc_hub.schemas.registry import SchemaRegistry


class Item(pydantic.BaseModel):
    sku: str
    qty: int


class OrderV1(pydantic.BaseModel):
    order_id: str
    items: list[Item]


class OrderV2(pydantic.BaseModel):
    order_id: str
    items: list[Item]
    note: str = ""


def envelope(event_type: str, payload: dict[str, Any], version: int = 1) -> Envelope:
    return Envelope.new(event_type, payload, key="k1", source="test", schema_version=version)


@pytest.fixture
def registry() -> SchemaRegistry:
    reg = SchemaRegistry()
    reg.register("shop.order.placed", 1, OrderV1)
    reg.register("shop.order.placed", 2, OrderV2, topic="orders")
    return reg


# --- registry ---------------------------------------------------------------------------------


def test_register_is_idempotent_and_lists_names_versions_and_specs(
    registry: SchemaRegistry,
) -> None:
    registry.register("shop.order.placed", 1, OrderV1)
    registry.register("shop.order.placed", 1, OrderV1, topic="orders")  # fills in the topic

    assert registry.names() == ["shop.order.placed"]
    assert registry.versions("shop.order.placed") == [1, 2]
    assert registry.versions("nope.nope") == []
    assert registry.get("shop.order.placed", 2) is OrderV2
    assert len(registry) == 2
    assert ("shop.order.placed", 1) in registry
    assert list(registry) == [
        EventSpec("shop.order.placed", 1, OrderV1, "orders"),
        EventSpec("shop.order.placed", 2, OrderV2, "orders"),
    ]


@pytest.mark.parametrize(
    ("version", "model", "topic", "message"),
    [
        (1, OrderV2, None, "different models"),
        (2, OrderV2, "elsewhere", "two topics"),
        (0, OrderV1, None, "version must be an integer >= 1"),
        (3, dict, None, "not a pydantic model"),
    ],
)
def test_register_rejects_conflicts_and_nonsense(
    registry: SchemaRegistry, version: int, model: type, topic: str | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        registry.register("shop.order.placed", version, model, topic=topic)


def test_from_pipelines_collects_events_and_names_the_conflicting_pipeline() -> None:
    first, second = Pipeline("first"), Pipeline("second")
    first.event("shop.order.placed", 1)(OrderV1)
    first.event("shop.order.placed", 2)(OrderV2)
    assert SchemaRegistry.from_pipelines([first]).versions("shop.order.placed") == [1, 2]

    second.event("shop.order.placed", 1)(OrderV2)
    with pytest.raises(ValueError, match="pipeline 'second'"):
        SchemaRegistry.from_pipelines([first, second])


def test_decode_returns_the_model_of_the_envelope_version(registry: SchemaRegistry) -> None:
    payload = {"order_id": "o1", "items": [{"sku": "a", "qty": 2}]}

    v1 = registry.decode(envelope("shop.order.placed", payload, 1))
    v2 = registry.decode(envelope("shop.order.placed", payload, 2))

    assert v1 == OrderV1(order_id="o1", items=[Item(sku="a", qty=2)])
    assert isinstance(v2, OrderV2)
    assert v2.note == ""


@pytest.mark.parametrize(
    ("event_type", "version", "payload", "message"),
    [
        ("shop.order.lost", 1, {}, r"unknown event type 'shop\.order\.lost'"),
        ("shop.order.placed", 3, {}, r"'shop\.order\.placed' has no schema v3 \(known: 1, 2\)"),
        (
            "shop.order.placed",
            1,
            {"order_id": "o1", "items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": "many"}]},
            r"invalid payload for 'shop\.order\.placed' v1: field 'items\.1\.qty'",
        ),
        (
            "shop.order.placed",
            2,
            {},
            r"field 'order_id': Field required \(and 1 more\)",
        ),
    ],
)
def test_decode_raises_a_permanent_schema_error(
    registry: SchemaRegistry,
    event_type: str,
    version: int,
    payload: dict[str, Any],
    message: str,
) -> None:
    with pytest.raises(SchemaError, match=message) as caught:
        registry.decode(envelope(event_type, payload, version))
    assert isinstance(caught.value, PermanentError)


def test_get_of_an_unknown_key_is_a_schema_error(registry: SchemaRegistry) -> None:
    with pytest.raises(SchemaError, match="no schema v9"):
        registry.get("shop.order.placed", 9)


# --- compatibility ----------------------------------------------------------------------------


class Base(pydantic.BaseModel):
    id: str
    count: int


class AddedWithDefault(Base):
    label: str = "x"
    tags: list[str] = pydantic.Field(default_factory=list)


class AddedRequired(Base):
    label: str


class Removed(pydantic.BaseModel):
    id: str


class Renamed(pydantic.BaseModel):
    id: str
    total: int


class TypeChanged(pydantic.BaseModel):
    id: str
    count: str


class MadeOptional(pydantic.BaseModel):
    id: str
    count: int | None = None


class WithDefault(pydantic.BaseModel):
    id: str
    count: int = 0


class AliasRenamed(pydantic.BaseModel):
    id: str
    count: int = pydantic.Field(alias="n")


class Address(pydantic.BaseModel):
    city: str


class AddressZip(pydantic.BaseModel):
    city: str
    zip: int


class Customer(pydantic.BaseModel):
    address: Address


class CustomerZip(pydantic.BaseModel):
    address: AddressZip


class OptionalCount(pydantic.BaseModel):
    id: str
    count: int | None = None


class CountRequiredAgain(pydantic.BaseModel):
    id: str
    count: int


def problems_of(*models: type[pydantic.BaseModel], start: int = 1) -> list[tuple[str | None, str]]:
    reg = SchemaRegistry()
    for offset, model in enumerate(models):
        reg.register("t.event", start + offset, model)
    return [(p.field, p.problem) for p in compat.check(reg)]


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (Base, Base, []),
        (Base, AddedWithDefault, []),
        (Base, WithDefault, []),
        (Base, MadeOptional, []),
        (Base, AddedRequired, [("label", "added without a default")]),
        (Base, Removed, [("count", "removed")]),
        (Base, Renamed, [("count", "removed"), ("total", "added without a default")]),
        (Base, TypeChanged, [("count", "type changed from integer to string")]),
        (Base, AliasRenamed, [("count", "removed"), ("n", "added without a default")]),
        (WithDefault, Base, [("count", "became required")]),
        (
            OptionalCount,
            CountRequiredAgain,
            [("count", "became required"), ("count", "no longer accepts null")],
        ),
        (Customer, CustomerZip, [("address.zip", "added without a default")]),
    ],
)
def test_compatibility_rule(
    old: type[pydantic.BaseModel],
    new: type[pydantic.BaseModel],
    expected: list[tuple[str, str]],
) -> None:
    found = problems_of(old, new)
    assert [field for field, _ in found] == [field for field, _ in expected]
    for (_, problem), (_, fragment) in zip(found, expected, strict=True):
        assert fragment in problem


def test_narrowing_away_from_null_is_a_problem() -> None:
    class Nullable(pydantic.BaseModel):
        count: int | None

    class NotNullable(pydantic.BaseModel):
        count: int

    assert problems_of(Nullable, NotNullable) == [("count", "no longer accepts null")]


def test_version_gap_and_late_start_are_problems() -> None:
    reg = SchemaRegistry()
    reg.register("t.gap", 1, Base)
    reg.register("t.gap", 3, AddedWithDefault)
    reg.register("t.late", 2, Base)

    found = compat.check(reg)

    assert [(p.event_type, p.old_version, p.new_version, p.field) for p in found] == [
        ("t.gap", 1, 3, None),
        ("t.late", None, 2, None),
    ]
    assert found[0].problem == "missing v2"
    assert "start at 2" in found[1].problem
    assert str(found[0]) == "t.gap v1 -> v3: missing v2"


def test_each_step_is_compared_with_the_one_before() -> None:
    reg = SchemaRegistry()
    reg.register("t.event", 1, Base)
    reg.register("t.event", 2, AddedWithDefault)
    reg.register("t.event", 3, AddedRequired)

    found = compat.check(reg)

    assert [(p.old_version, p.new_version, p.field, p.problem) for p in found] == [
        (2, 3, "label", "became required (older payloads may lack it)"),
        (2, 3, "tags", "removed (or renamed)"),
    ]


# --- export -----------------------------------------------------------------------------------


def test_export_writes_one_deterministic_schema_per_version(
    registry: SchemaRegistry, tmp_path: Path
) -> None:
    target = tmp_path / "schemas"

    paths = export.export(registry, target)

    assert [p.name for p in paths] == ["shop.order.placed.v1.json", "shop.order.placed.v2.json"]
    first = [p.read_bytes() for p in paths]
    assert all(text.endswith(b"}\n") for text in first)
    assert [p.read_bytes() for p in export.export(registry, target)] == first

    schema = json.loads(first[1])
    assert schema["$id"] == "urn:aigc-hub:event:shop.order.placed:v2"
    assert schema["title"] == "shop.order.placed v2"
    assert schema["$schema"] == export.JSON_SCHEMA_DIALECT
    assert (schema["x-event-type"], schema["x-schema-version"]) == ("shop.order.placed", 2)
    assert schema["x-topic"] == "orders"
    assert schema["x-model"] == "OrderV2"
    assert list(json.loads(first[0])) == sorted(json.loads(first[0]))


def test_exported_schema_is_the_models_json_schema(
    registry: SchemaRegistry, tmp_path: Path
) -> None:
    (path,) = export.export(_only(registry, 1), tmp_path)
    schema = json.loads(path.read_text())

    assert schema["type"] == "object"
    assert schema["required"] == ["order_id", "items"]
    assert schema["properties"]["items"] == {
        "items": {"$ref": "#/$defs/Item"},
        "title": "Items",
        "type": "array",
    }
    # every $ref resolves inside the document
    assert set(schema["$defs"]) == {"Item"}
    expected = OrderV1.model_json_schema()
    assert {k: v for k, v in schema.items() if k in expected and k != "title"} == {
        k: v for k, v in expected.items() if k != "title"
    }


def test_export_of_a_model_without_json_schema_is_a_schema_error(tmp_path: Path) -> None:
    class Opaque:
        pass

    class Weird(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(arbitrary_types_allowed=True)
        thing: Opaque

    reg = SchemaRegistry()
    reg.register("t.weird", 1, Weird)
    with pytest.raises(SchemaError, match=r"'t\.weird' v1: no JSON Schema"):
        export.export(reg, tmp_path)


def _only(registry: SchemaRegistry, version: int) -> SchemaRegistry:
    return SchemaRegistry(spec for spec in registry if spec.version == version)
