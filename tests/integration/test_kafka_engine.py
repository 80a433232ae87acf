"""The Kafka engine beyond the broker contract: provisioning, profiles, partitioning parity,
backpressure, the poll thread, failures, and ``aigc-hub topics apply`` against Tansu."""

from __future__ import annotations

import asyncio
import importlib
import logging
import socket
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from aigc_hub.cli import common
from aigc_hub.cli.main import app
from aigc_hub.messaging.base import OutgoingMessage, Record, TopicPartition, partition_for
from aigc_hub.messaging.catalog import DAY_MS, TopicSpec
from aigc_hub.messaging.memory import MemoryBroker
from aigc_hub.pipeline import Pipeline
from aigc_hub.testing.tansu import KafkaEndpoint
from tests.conftest import kafka_or_skip

pytestmark = pytest.mark.kafka

#: A pipeline with one topic of its own, for ``topics apply`` (see ``apply_env``).
PIPELINE = Pipeline("kafkatest")


@pytest.fixture(scope="module")
def kafka_endpoint() -> Iterator[KafkaEndpoint]:
    """A Tansu of this module (or ``$AIGC_HUB_TEST_KAFKA``)."""
    with kafka_or_skip() as endpoint:
        yield endpoint


def fresh(prefix: str) -> str:
    return f"{prefix}.{uuid.uuid4().hex[:8]}"


async def collect(consumer: Any, n: int, *, within: float = 15.0) -> list[Record]:
    out: list[Record] = []
    async with asyncio.timeout(within):
        while len(out) < n:
            out.extend(await consumer.fetch(n - len(out), 0.2))
    return out


# -- import guard ------------------------------------------------------------------------------


def test_import_without_confluent_kafka_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in sys.modules if n.startswith("aigc_hub.messaging.kafka")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "confluent_kafka", None)  # as if not installed
    with pytest.raises(ImportError, match=r"pip install 'aigc-hub\[kafka\]'"):
        importlib.import_module("aigc_hub.messaging.kafka")


# -- provisioning ------------------------------------------------------------------------------


async def test_ensure_topics_creates_with_retention_and_reports_every_difference(
    kafka_endpoint: KafkaEndpoint,
) -> None:
    from aigc_hub.messaging.kafka import TopicMismatch

    broker = kafka_endpoint.broker()
    kept, forever = fresh("keep"), fresh("forever")
    try:
        await broker.ensure_topics([TopicSpec(kept, 2, DAY_MS), TopicSpec(forever, 1, None)])
        states = await broker.describe_topics([kept, forever, fresh("absent")])
        assert {n: (s.partitions, s.retention_ms) for n, s in states.items()} == {
            kept: (2, DAY_MS),
            forever: (1, None),
        }
        wanted = [TopicSpec(kept, 3, 2 * DAY_MS), TopicSpec(forever, 1, None)]
        with pytest.raises(TopicMismatch) as caught:
            await broker.ensure_topics(wanted)
        [status] = caught.value.statuses
        assert status.name == kept
        assert [(d.setting, d.declared, d.actual) for d in status.differences] == [
            ("partitions", 3, 2),
            ("retention.ms", 2 * DAY_MS, DAY_MS),
        ]
        assert "partitions declared 3, actual 2" in str(caught.value)
        plan = await broker.plan([*wanted, TopicSpec(fresh("new"), 4, None)])
        assert [s.status for s in plan] == ["differs", "unchanged", "missing"]
        after = await broker.describe_topics([kept])
        assert (after[kept].partitions, after[kept].retention_ms) == (2, DAY_MS)  # untouched
    finally:
        await broker.close()


async def test_publish_to_an_undeclared_topic_creates_it_with_one_partition(
    kafka_endpoint: KafkaEndpoint,
) -> None:
    broker = kafka_endpoint.broker()
    topic = fresh("auto")
    try:
        await broker.publish([OutgoingMessage(topic, "a", b"1"), OutgoingMessage(topic, "b", b"2")])
        [lag] = await broker.lag(fresh("g"), [topic])
        assert (lag.partition, lag.end_offset) == (0, 2)
    finally:
        await broker.close()


# -- producing ---------------------------------------------------------------------------------


async def test_keys_land_on_the_same_partition_numbers_as_in_the_memory_engine(
    kafka_endpoint: KafkaEndpoint,
) -> None:
    broker, memory = kafka_endpoint.broker(), MemoryBroker()
    topic = fresh("parity")
    spec = TopicSpec(topic, 12, None)
    keys = [f"tenant-{i}/task-{i * 7919}" for i in range(120)]
    try:
        for engine in (broker, memory):
            await engine.ensure_topics([spec])
            await engine.publish([OutgoingMessage(topic, k, k.encode()) for k in keys])
        got = await collect(broker.consumer(fresh("g"), [topic]), len(keys))
        mem = await collect(memory.consumer("g", [topic]), len(keys))
        kafka_at = {r.key: r.partition for r in got}
        assert kafka_at == {r.key: r.partition for r in mem}
        assert kafka_at == {k: partition_for(k, 12) for k in keys}
        assert len(set(kafka_at.values())) == 12
    finally:
        await broker.close()
        await memory.close()


async def test_each_topic_publishes_through_its_profile(kafka_endpoint: KafkaEndpoint) -> None:
    from aigc_hub.messaging import kafka_producer

    broker = kafka_endpoint.broker()
    telemetry, reliable = fresh("playback"), fresh("orders")
    try:
        await broker.ensure_topics(
            [TopicSpec(telemetry, 2, DAY_MS, profile="telemetry"), TopicSpec(reliable, 2, None)]
        )
        await broker.publish([OutgoingMessage(telemetry, "k", b"t")])
        assert set(broker._producers) == {"telemetry"}
        await broker.publish(
            [OutgoingMessage(reliable, "k", b"r"), OutgoingMessage(fresh("x"), None, b"")]
        )
        assert set(broker._producers) == {"telemetry", "reliable"}
    finally:
        await broker.close()
    options: dict[str, Any] = {
        "bootstrap": "b",
        "client_id": "c",
        "delivery_timeout_ms": 30_000,
        "telemetry_linger_ms": 5,
        "telemetry_batch_bytes": 65_536,
        "overrides": {},
        "logger": logging.getLogger("test"),
    }
    reliable_conf = kafka_producer.producer_config("reliable", **options)
    assert (reliable_conf["acks"], reliable_conf["enable.idempotence"]) == ("all", True)
    assert reliable_conf["delivery.timeout.ms"] == 30_000 and "retries" not in reliable_conf
    telemetry_conf = kafka_producer.producer_config("telemetry", **options)
    assert (telemetry_conf["acks"], telemetry_conf["linger.ms"]) == (1, 5)
    assert (telemetry_conf["batch.size"], telemetry_conf["enable.idempotence"]) == (65_536, False)


async def test_publish_raises_when_a_message_is_refused(kafka_endpoint: KafkaEndpoint) -> None:
    from aigc_hub.messaging.kafka import PublishFailed

    broker = kafka_endpoint.broker(
        producer_overrides={**kafka_endpoint.producer_settings, "message.max.bytes": 2000}
    )
    topic = fresh("big")
    try:
        await broker.ensure_topics([TopicSpec(topic, 1, None)])
        small, large = OutgoingMessage(topic, "k", b"ok"), OutgoingMessage(topic, "k", b"x" * 5000)
        with pytest.raises(PublishFailed, match="MSG_SIZE_TOO_LARGE"):
            await broker.publish([small, large])
        await broker.publish([small])  # the producer is still usable
    finally:
        await broker.close()


# -- consuming ---------------------------------------------------------------------------------


async def test_a_full_buffer_pauses_fetching_without_losing_or_reordering(
    kafka_endpoint: KafkaEndpoint,
) -> None:
    broker = kafka_endpoint.broker(max_buffered=100)
    topic = fresh("flood")
    try:
        await broker.ensure_topics([TopicSpec(topic, 2, None)])
        await broker.publish([OutgoingMessage(topic, f"k{i % 5}", b"%d" % i) for i in range(600)])
        consumer = broker.consumer(fresh("g"), [topic])
        got: list[Record] = []
        async with asyncio.timeout(30):
            while len(got) < 600:
                got.extend(await consumer.fetch(7, 0.2))
                await asyncio.sleep(0)  # a slow application: the poll thread must wait for it
        for p in (0, 1):
            offsets = [r.offset for r in got if r.partition == p]
            assert offsets == list(range(len(offsets)))
        assert sorted(int(r.value) for r in got) == list(range(600))
    finally:
        await broker.close()


async def test_pause_holds_a_partition_until_resume(kafka_endpoint: KafkaEndpoint) -> None:
    broker = kafka_endpoint.broker()
    topic = fresh("paused")
    try:
        await broker.ensure_topics([TopicSpec(topic, 2, None)])
        consumer = broker.consumer(fresh("g"), [topic])
        async with asyncio.timeout(10):
            while len(consumer.assignment()) < 2:
                await consumer.fetch(10, 0.05)
        held = TopicPartition(topic, partition_for("held", 2))
        free = TopicPartition(topic, partition_for("free", 2))
        assert held != free
        consumer.pause([held])
        assert consumer.paused() == {held}
        await broker.publish(
            [OutgoingMessage(topic, k, b"%d" % i) for i in range(20) for k in ("held", "free")]
        )
        first = await collect(consumer, 20)
        assert {r.tp for r in first} == {free}
        assert await consumer.fetch(10, 0.3) == []
        consumer.resume([held])
        later = await collect(consumer, 20)
        assert [(r.tp, r.offset) for r in later] == [(held, i) for i in range(20)]
    finally:
        await broker.close()


async def test_a_long_handler_keeps_the_partitions(kafka_endpoint: KafkaEndpoint) -> None:
    """The poll thread polls while the application does not, so ``max.poll.interval.ms``
    (2.5 s here) passing without a fetch costs no rebalance and no redelivery."""
    settings = {**kafka_endpoint.consumer_settings, "max.poll.interval.ms": 2500}
    broker = kafka_endpoint.broker(consumer_overrides=settings)
    topic = fresh("slow")
    revoked: list[set[TopicPartition]] = []

    async def on_revoke(tps: set[TopicPartition]) -> None:
        revoked.append(tps)

    try:
        await broker.ensure_topics([TopicSpec(topic, 2, None)])
        await broker.publish([OutgoingMessage(topic, f"k{i}", b"%d" % i) for i in range(10)])
        consumer = broker.consumer(fresh("g"), [topic], on_revoke=on_revoke)
        first = await collect(consumer, 10)
        await asyncio.sleep(4)  # real time on purpose: librdkafka's poll timer is what we test
        await broker.publish([OutgoingMessage(topic, "k", b"late")])
        [late] = await collect(consumer, 1)
        assert late.value == b"late" and revoked == []
        await consumer.commit({r.tp: r.offset + 1 for r in [*first, late]})
        assert sum(lag.lag for lag in await broker.lag(consumer.group, [topic])) == 0
    finally:
        await broker.close()


# -- aigc-hub topics apply ---------------------------------------------------------------------


@pytest.fixture
def apply_env(monkeypatch: pytest.MonkeyPatch, kafka_endpoint: KafkaEndpoint) -> TopicSpec:
    """Install ``PIPELINE`` with a topic named for this test; point the CLI at Tansu."""
    spec = TopicSpec(fresh("kafkatest.apply"), 3, 2 * DAY_MS, pipeline="kafkatest")
    PIPELINE.topics[:] = [spec]
    monkeypatch.setenv(common.PIPELINES_ENV, f"{__name__}:PIPELINE")
    monkeypatch.setenv("AIGC_HUB_KAFKA_BOOTSTRAP", kafka_endpoint.bootstrap)
    return spec


def _row(output: str, topic: str) -> str:
    [row] = [line for line in output.splitlines() if f" {topic} " in line]
    return row


def test_topics_apply_creates_then_finds_everything_unchanged(
    apply_env: TopicSpec, kafka_endpoint: KafkaEndpoint
) -> None:
    runner = CliRunner()
    planned = runner.invoke(app, ["topics", "apply", "--dry-run"])
    assert planned.exit_code == 0, planned.output
    assert "missing" in _row(planned.stdout, apply_env.name)
    first = runner.invoke(app, ["topics", "apply"])
    assert first.exit_code == 0, first.output
    assert "created" in _row(first.stdout, apply_env.name)
    for topic in ("topic.system.dlq", "topic.system.retry", "notification.event"):
        assert _row(first.stdout, topic).split("│")[2].strip() in ("created", "unchanged")
    again = runner.invoke(app, ["topics", "apply", "--bootstrap", kafka_endpoint.bootstrap])
    assert again.exit_code == 0, again.output
    assert "unchanged" in _row(again.stdout, apply_env.name)
    assert " 0 created, " in f" {again.stdout.splitlines()[-1]}"
    assert again.stdout.splitlines()[-1].endswith(" 0 differs")


def test_topics_apply_reports_a_topic_that_differs_and_exits_4(
    apply_env: TopicSpec, kafka_endpoint: KafkaEndpoint
) -> None:
    async def make_it_differ() -> None:
        broker = kafka_endpoint.broker()
        try:
            await broker.ensure_topics([TopicSpec(apply_env.name, 2, DAY_MS)])
        finally:
            await broker.close()

    asyncio.run(make_it_differ())
    result = CliRunner().invoke(app, ["topics", "apply"])
    assert result.exit_code == common.ExitCode.CONFLICT, result.output
    row = _row(result.stdout, apply_env.name)
    assert "differs" in row
    assert "partitions: declared 3, actual 2" in row
    assert "retention: declared 2 d, actual 1 d" in row
    assert result.stderr.startswith("error: 1 existing topics differ")


def test_topics_apply_on_an_unreachable_cluster_exits_5_with_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv(common.PIPELINES_ENV, "")
    result = CliRunner().invoke(
        app, ["topics", "apply", "--bootstrap", f"127.0.0.1:{port}", "--timeout", "1"]
    )
    assert result.exit_code == common.ExitCode.UNAVAILABLE, result.output
    assert result.stdout == ""
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: Kafka at 127.0.0.1:") and "unreachable" in line
