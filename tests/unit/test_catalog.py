"""The backbone's topic catalog, the pipelines' own topics, and the key-to-partition hash."""

from __future__ import annotations

import dataclasses
import zlib

import pytest

from aigc_hub.messaging.base import partition_for
from aigc_hub.messaging.catalog import (
    DAY_MS,
    DLQ_TOPIC,
    NOTIFICATION_TOPIC,
    RETRY_TOPIC,
    TopicCatalog,
    TopicSpec,
    backbone_catalog,
)
from aigc_hub.pipelines.generation.pipeline import pipeline as generation

# name: (partitions, retention in days or None for forever)
BACKBONE: dict[str, tuple[int, int | None]] = {
    "topic.system.dlq": (3, None),
    "topic.system.retry": (6, 7),
    "notification.event": (12, 7),
}
# seed 004 §3.5.3 names them without numbers: 12 partitions, 7 days each
GENERATION = {
    "generation.dispatch",
    "provider.status.observe",
    "provider.poll",
    "output.fetch",
    "output.fetch.urgent",  # ours: the seed's high-priority queue for expiring URLs
    "media.process",
    "render.execute",
    "billing.command",
    "reconcile.command",
}


def test_day_is_86_400_000_ms() -> None:
    assert DAY_MS == 86_400_000


def test_the_backbone_catalog_holds_only_the_backbones_topics() -> None:
    catalog = backbone_catalog()

    assert {spec.name for spec in catalog} == set(BACKBONE)
    assert {spec.pipeline for spec in catalog} == {"system"}


@pytest.mark.parametrize("name", sorted(BACKBONE))
def test_backbone_topic_numbers(name: str) -> None:
    partitions, days = BACKBONE[name]

    spec = backbone_catalog().get(name)

    assert spec.partitions == partitions
    assert spec.retention_ms == (None if days is None else days * DAY_MS)
    assert spec.profile == "reliable"


def test_backbone_topic_constants() -> None:
    catalog = backbone_catalog()

    assert DLQ_TOPIC == "topic.system.dlq"
    assert RETRY_TOPIC == "topic.system.retry"
    assert NOTIFICATION_TOPIC == "notification.event"
    assert catalog.get(DLQ_TOPIC).retention_ms is None  # dead letters are kept forever


def test_generation_declares_its_own_topics_in_its_pipeline() -> None:
    assert {spec.name for spec in generation.topics} == GENERATION
    for spec in generation.topics:
        assert (spec.partitions, spec.retention_ms) == (12, 7 * DAY_MS), spec.name
        assert spec.pipeline == "generation" and spec.profile == "reliable"
        assert "not given by the seed" in spec.note, spec.name
    assert not GENERATION & {spec.name for spec in backbone_catalog()}


def test_iteration_is_sorted_by_pipeline_then_name() -> None:
    catalog = backbone_catalog()
    for spec in generation.topics:
        catalog.add(spec)

    specs = list(catalog)

    assert specs == sorted(specs, key=lambda s: (s.pipeline, s.name))
    assert specs[0].pipeline == "generation"
    assert specs[-1].pipeline == "system"


def test_each_call_builds_an_independent_catalog() -> None:
    first = backbone_catalog()
    first.add(TopicSpec("extra.topic", 1, DAY_MS, pipeline="extra"))

    assert "extra.topic" not in backbone_catalog()


def test_unknown_topic_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        backbone_catalog().get("no.such.topic")
    assert "no.such.topic" not in backbone_catalog()


def test_declaring_the_same_topic_again_identically_is_fine() -> None:
    catalog = backbone_catalog()
    spec = catalog.get(RETRY_TOPIC)

    catalog.add(dataclasses.replace(spec))

    assert len(catalog) == len(BACKBONE)
    assert catalog.get(RETRY_TOPIC) == spec


@pytest.mark.parametrize(
    "change",
    [
        {"partitions": 24},
        {"retention_ms": 30 * DAY_MS},
        {"retention_ms": None},
        {"profile": "telemetry"},
        {"pipeline": "generation"},
        {"note": "another note"},
    ],
)
def test_redeclaring_with_different_settings_raises(change: dict[str, object]) -> None:
    catalog = backbone_catalog()
    spec = catalog.get(RETRY_TOPIC)

    with pytest.raises(ValueError, match=r"topic.system.retry.*declared twice"):
        catalog.add(dataclasses.replace(spec, **change))  # type: ignore[arg-type]

    assert catalog.get(RETRY_TOPIC) == spec


def test_duplicate_names_in_the_constructor_raise() -> None:
    with pytest.raises(ValueError, match="declared twice"):
        TopicCatalog([TopicSpec("t", 1, None), TopicSpec("t", 2, None)])


@pytest.mark.parametrize("partitions", [0, -1])
def test_a_topic_needs_a_partition(partitions: int) -> None:
    with pytest.raises(ValueError, match="at least one partition"):
        TopicCatalog([TopicSpec("t", partitions, None)])


# --- partition_for ----------------------------------------------------------------------------


def test_partition_for_is_crc32_of_the_utf8_key() -> None:
    assert zlib.crc32(b"123456789") == 0xCBF43926  # the CRC-32 check value
    assert partition_for("123456789", 12) == 0xCBF43926 % 12 == 2
    assert partition_for("123456789", 1_000_000) == 780_262
    assert partition_for("订单-42", 24) == zlib.crc32("订单-42".encode()) % 24


def test_partition_for_is_stable_for_a_key() -> None:
    keys = [f"apply-{n}" for n in range(500)]

    first = [partition_for(key, 12) for key in keys]
    again = [partition_for(key, 12) for key in keys]

    assert first == again
    assert all(0 <= p < 12 for p in first)
    assert set(first) == set(range(12))  # keys spread over every partition


def test_partition_for_a_missing_key_uses_the_fallback() -> None:
    assert partition_for(None, 6) == 0
    assert partition_for(None, 6, fallback=4) == 4
    assert partition_for(None, 6, fallback=13) == 1


def test_one_partition_takes_every_key() -> None:
    assert {partition_for(f"k{n}", 1) for n in range(50)} == {0}
