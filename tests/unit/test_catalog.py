"""The seeded topic catalog (the seeds' numbers) and the stable key-to-partition hash."""

from __future__ import annotations

import dataclasses
import zlib

import pytest

from aigc_hub.messaging.base import partition_for
from aigc_hub.messaging.catalog import (
    DAY_MS,
    DLQ_TOPIC,
    RETRY_TOPIC,
    TopicCatalog,
    TopicSpec,
    seeded_catalog,
)

# name: (partitions, retention in days or None for forever, profile, pipeline)
SEEDED: dict[str, tuple[int, int | None, str, str]] = {
    # backbone
    "topic.system.dlq": (3, None, "reliable", "system"),
    "topic.system.retry": (6, 7, "reliable", "system"),
    # avcc, seed 000 §9.1
    "topic.avcc.apply.created": (6, 7, "reliable", "avcc"),
    "topic.review.task.finished": (12, 7, "reliable", "avcc"),
    "topic.chain.tx.pending": (6, 7, "reliable", "avcc"),
    "topic.chain.tx.confirmed": (6, 30, "reliable", "avcc"),
    "topic.playback.event": (24, 3, "telemetry", "avcc"),
    # documents, seed 003 §2.2
    "documents-uploaded": (12, 7, "reliable", "documents"),
    "chunks-created": (24, 3, "reliable", "documents"),
    "embeddings-generated": (24, 3, "reliable", "documents"),
    "ai-analysis-requests": (12, 7, "reliable", "documents"),
    "ai-analysis-completed": (12, 30, "reliable", "documents"),
    "analysis-dlq": (3, 30, "reliable", "documents"),
    # vistack, seed 002 (no numbers given: 12 partitions, 7 days)
    "transcode": (12, 7, "reliable", "vistack"),
    "delete_file": (12, 7, "reliable", "vistack"),
    "danmaku": (12, 7, "reliable", "vistack"),
    "comment": (12, 7, "reliable", "vistack"),
    # generation, seed 004 §3.5.3 (no numbers given: 12 partitions, 7 days)
    "generation.dispatch": (12, 7, "reliable", "generation"),
    "provider.status.observe": (12, 7, "reliable", "generation"),
    "provider.poll": (12, 7, "reliable", "generation"),
    "output.fetch": (12, 7, "reliable", "generation"),
    "media.process": (12, 7, "reliable", "generation"),
    "render.execute": (12, 7, "reliable", "generation"),
    "billing.command": (12, 7, "reliable", "generation"),
    "notification.event": (12, 7, "reliable", "generation"),
    "reconcile.command": (12, 7, "reliable", "generation"),
}


def test_day_is_86_400_000_ms() -> None:
    assert DAY_MS == 86_400_000


def test_the_seeded_catalog_holds_exactly_the_seeds_topics() -> None:
    catalog = seeded_catalog()

    assert {spec.name for spec in catalog} == set(SEEDED)
    assert len(catalog) == len(SEEDED) == 26


@pytest.mark.parametrize("name", sorted(SEEDED))
def test_seeded_topic_numbers(name: str) -> None:
    partitions, days, profile, pipeline = SEEDED[name]

    spec = seeded_catalog().get(name)

    assert spec.partitions == partitions
    assert spec.retention_ms == (None if days is None else days * 86_400_000)
    assert spec.profile == profile
    assert spec.pipeline == pipeline


def test_backbone_topic_constants() -> None:
    catalog = seeded_catalog()

    assert DLQ_TOPIC == "topic.system.dlq"
    assert RETRY_TOPIC == "topic.system.retry"
    assert catalog.get(DLQ_TOPIC).retention_ms is None  # dead letters are kept forever
    assert DLQ_TOPIC in catalog and RETRY_TOPIC in catalog


def test_only_playback_events_ride_the_telemetry_road() -> None:
    telemetry = [spec.name for spec in seeded_catalog() if spec.profile == "telemetry"]

    assert telemetry == ["topic.playback.event"]


def test_topics_without_seed_numbers_say_so() -> None:
    for spec in seeded_catalog():
        if spec.pipeline in ("vistack", "generation") or spec.name == RETRY_TOPIC:
            assert "not given by the seed" in spec.note, spec.name


def test_iteration_is_sorted_by_pipeline_then_name() -> None:
    specs = list(seeded_catalog())

    assert specs == sorted(specs, key=lambda s: (s.pipeline, s.name))
    assert specs[0].pipeline == "avcc"
    assert specs[-1].pipeline == "vistack"


def test_each_call_builds_an_independent_catalog() -> None:
    first = seeded_catalog()
    first.add(TopicSpec("extra.topic", 1, DAY_MS, pipeline="extra"))

    assert "extra.topic" not in seeded_catalog()


def test_unknown_topic_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        seeded_catalog().get("no.such.topic")
    assert "no.such.topic" not in seeded_catalog()


def test_declaring_the_same_topic_again_identically_is_fine() -> None:
    catalog = seeded_catalog()
    spec = catalog.get("documents-uploaded")

    catalog.add(dataclasses.replace(spec))

    assert len(catalog) == 26
    assert catalog.get("documents-uploaded") == spec


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
    catalog = seeded_catalog()
    spec = catalog.get("documents-uploaded")

    with pytest.raises(ValueError, match=r"documents-uploaded.*declared twice"):
        catalog.add(dataclasses.replace(spec, **change))  # type: ignore[arg-type]

    assert catalog.get("documents-uploaded") == spec


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
