"""The broker on Apache Kafka (or any Kafka-protocol broker), through confluent-kafka.

Partitioning is the hub's, not Kafka's: every message is produced to the explicit partition
``partition_for(key, partitions)`` (CRC-32 of the key), with the topic's partition count
read from the cluster once and cached, so a key lands on the same partition number in every
engine. Keyless messages of one ``publish`` share a partition, rotating between calls.
Delivery profiles come from the topic specs this broker was given (``ensure_topics``,
``apply``, ``plan``); other topics are ``reliable``. Publishing to an undeclared topic
creates it with one partition, as the other engines do. Record timestamps are Kafka's
(producer create time). Consumers are in ``kafka_consumer`` and ``kafka_poll`` (their
poll thread), producers in ``kafka_producer``, provisioning in ``kafka_topics``, lag in
``kafka_lag``.
"""

from __future__ import annotations

try:  # first, so a missing client names the extra to install
    import confluent_kafka  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "the Kafka engine needs confluent-kafka: pip install 'aigc-hub[kafka]'"
    ) from exc

import asyncio
import itertools
import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from confluent_kafka import admin as ck_admin

from aigc_hub.messaging import kafka_consumer, kafka_lag, kafka_producer, kafka_tail, kafka_topics
from aigc_hub.messaging.base import (
    DeliveryProfile,
    Features,
    OutgoingMessage,
    PartitionLag,
    RebalanceCallback,
    partition_for,
)
from aigc_hub.messaging.catalog import TopicSpec
from aigc_hub.messaging.kafka_consumer import KafkaConsumer
from aigc_hub.messaging.kafka_poll import PollSettings
from aigc_hub.messaging.kafka_producer import PublishFailed
from aigc_hub.messaging.kafka_topics import (
    KafkaUnavailable,
    TopicDifference,
    TopicMismatch,
    TopicState,
    TopicStatus,
)

__all__ = [
    "LIBRDKAFKA_LOGGER",
    "KafkaBroker",
    "KafkaConsumer",
    "KafkaUnavailable",
    "PublishFailed",
    "TopicDifference",
    "TopicMismatch",
    "TopicState",
    "TopicStatus",
]

#: The logger librdkafka's own messages go to (connection failures are ERROR records).
LIBRDKAFKA_LOGGER = "aigc_hub.messaging.kafka.client"


class KafkaBroker:
    """A broker on a Kafka cluster; safe for many tasks of one event loop.

    ``consumer_overrides`` and ``producer_overrides`` are librdkafka settings laid over the
    defaults (e.g. ``session.timeout.ms``). No connection is opened before the first call.
    """

    features = Features(
        ordered_by_key=True,
        persistent=True,
        consumer_groups=True,
        cross_process=True,
        retention=True,
        pause_resume=True,
    )

    def __init__(
        self,
        bootstrap: str,
        *,
        client_id: str = "aigc-hub",
        delivery_timeout_ms: int = 120_000,
        telemetry_linger_ms: int = 5,
        telemetry_batch_bytes: int = 65_536,
        replication_factor: int = -1,
        request_timeout: float = 10.0,
        poll_interval: float = 0.05,
        max_buffered: int = 10_000,
        rebalance_callback_timeout: float = 60.0,
        consumer_overrides: Mapping[str, Any] | None = None,
        producer_overrides: Mapping[str, Any] | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.client_id = client_id
        self.delivery_timeout_ms = delivery_timeout_ms
        self.telemetry_linger_ms = telemetry_linger_ms
        self.telemetry_batch_bytes = telemetry_batch_bytes
        self.replication_factor = replication_factor
        self.request_timeout = request_timeout
        self.poll_interval = poll_interval
        self.max_buffered = max_buffered
        self.rebalance_callback_timeout = rebalance_callback_timeout
        self.consumer_overrides = dict(consumer_overrides or {})
        self.producer_overrides = dict(producer_overrides or {})
        self._logger = logging.getLogger(LIBRDKAFKA_LOGGER)
        self._admin_client: ck_admin.AdminClient | None = None
        self._producers: dict[DeliveryProfile, kafka_producer.ProfileProducer] = {}
        self._consumers: list[KafkaConsumer] = []
        self._tails: list[kafka_tail.KafkaTail] = []
        self._profiles: dict[str, DeliveryProfile] = {}
        self._partitions: dict[str, int] = {}
        self._metadata_lock = asyncio.Lock()
        self._sticky = itertools.count()
        self._closed = False

    # -- topics ------------------------------------------------------------------------------

    async def ensure_topics(self, specs: Sequence[TopicSpec]) -> None:
        """Create missing topics; raise :class:`TopicMismatch` (a ValueError) listing every
        difference of existing ones (partitions, retention), which are left unchanged."""
        statuses = await self.apply(specs)
        if any(s.status == "differs" for s in statuses):
            raise TopicMismatch(statuses)

    async def apply(self, specs: Sequence[TopicSpec]) -> list[TopicStatus]:
        """Create missing topics; report each spec as created, unchanged or differs."""
        self._check_open()
        statuses = await kafka_topics.apply(
            self._admin,
            specs,
            bootstrap=self.bootstrap,
            timeout=self.request_timeout,
            replication_factor=self.replication_factor,
        )
        self._learn(statuses)
        return statuses

    async def plan(self, specs: Sequence[TopicSpec]) -> list[TopicStatus]:
        """Report each spec as missing, unchanged or differs; changes nothing."""
        self._check_open()
        statuses = await kafka_topics.plan(
            self._admin, specs, bootstrap=self.bootstrap, timeout=self.request_timeout
        )
        self._learn(statuses)
        return statuses

    async def describe_topics(self, names: Iterable[str]) -> dict[str, TopicState]:
        """Partitions and retention of those of ``names`` that exist on the cluster."""
        self._check_open()
        return await kafka_topics.describe(
            self._admin, names, bootstrap=self.bootstrap, timeout=self.request_timeout
        )

    # -- publishing --------------------------------------------------------------------------

    async def publish(self, messages: Sequence[OutgoingMessage]) -> None:
        """Produce all messages, in order per key; return when Kafka acknowledged every one.

        Raises :class:`PublishFailed` on any delivery error (some messages may have been
        written) and :class:`KafkaUnavailable` when partition counts cannot be read.
        """
        self._check_open()
        if not messages:
            return
        counts = await self._partition_counts({m.topic for m in messages})
        keyless = next(self._sticky)
        batches: dict[DeliveryProfile, list[tuple[OutgoingMessage, int]]] = {}
        for msg in messages:
            partition = partition_for(msg.key, counts[msg.topic], fallback=keyless)
            profile = self._profiles.get(msg.topic, "reliable")
            batches.setdefault(profile, []).append((msg, partition))
        results = await asyncio.gather(
            *(self._producer(profile).send(batch) for profile, batch in batches.items()),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result

    # -- consuming ---------------------------------------------------------------------------

    def consumer(
        self,
        group: str,
        topics: Sequence[str],
        *,
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
    ) -> KafkaConsumer:
        """A new member of ``group``; joins now inside a running loop, else at its first fetch."""
        self._check_open()
        conf = kafka_consumer.consumer_config(
            bootstrap=self.bootstrap,
            client_id=self.client_id,
            group=group,
            overrides=self.consumer_overrides,
            logger=self._logger,
        )
        settings = PollSettings(
            poll_interval=self.poll_interval,
            max_buffered=self.max_buffered,
            request_timeout=self.request_timeout,
            callback_timeout=self.rebalance_callback_timeout,
        )
        member = KafkaConsumer(
            conf,
            tuple(topics),
            settings,
            on_assign=on_assign,
            on_revoke=on_revoke,
            on_closed=self._forget_consumer,
        )
        self._consumers.append(member)
        return member

    async def tail(self, topics: Sequence[str]) -> kafka_tail.KafkaTail:
        """A group-less reader of ``topics`` from their high watermarks; commits nothing.

        On Tansu the high watermark is exact only for unbatched producers (see ``kafka_lag``).
        """
        self._check_open()
        conf = kafka_consumer.consumer_config(
            bootstrap=self.bootstrap,
            client_id=f"{self.client_id}.tail",
            group=f"{self.client_id}.tail-{uuid.uuid4().hex}",  # never joined nor committed
            overrides=self.consumer_overrides,
            logger=self._logger,
        ) | {"auto.offset.reset": "latest"}
        reader = kafka_tail.KafkaTail(
            conf,
            tuple(topics),
            loop=asyncio.get_running_loop(),
            to_record=kafka_consumer.to_record,
            poll_interval=self.poll_interval,
            max_buffered=self.max_buffered,
            request_timeout=self.request_timeout,
        )
        try:
            async with asyncio.timeout(self.request_timeout * 3):
                await asyncio.wrap_future(reader.ready)
        except BaseException:
            await reader.close()
            raise
        self._tails = [t for t in self._tails if not t.closed] + [reader]
        return reader

    async def lag(self, group: str, topics: Sequence[str]) -> list[PartitionLag]:
        """Committed offset, end offset and oldest unconsumed time per existing partition.

        In the order of ``topics``, then by partition; a group that never committed is at 0.
        On Tansu the end offset is approximate (see ``kafka_lag``).
        """
        self._check_open()
        probe = kafka_consumer.consumer_config(
            bootstrap=self.bootstrap,
            client_id=f"{self.client_id}.lag",
            group=f"{self.client_id}.lag-probe",  # never joined: the probe only assigns
            overrides=self.consumer_overrides,
            logger=self._logger,
        )
        return await kafka_lag.read(
            self._admin,
            probe,
            group,
            topics,
            bootstrap=self.bootstrap,
            timeout=self.request_timeout,
        )

    async def close(self) -> None:
        """Close consumers (each runs ``on_revoke`` and leaves its group), then flush producers."""
        if self._closed:
            return
        for member in list(self._consumers):
            await member.close()
        for reader in self._tails:
            await reader.close()
        self._tails.clear()
        self._closed = True
        for producer in self._producers.values():
            await producer.close(self.delivery_timeout_ms / 1000)
        self._producers.clear()
        self._admin_client = None

    # -- internals ---------------------------------------------------------------------------

    @property
    def _admin(self) -> ck_admin.AdminClient:
        if self._admin_client is None:
            conf: dict[str, Any] = {
                "bootstrap.servers": self.bootstrap,
                "client.id": f"{self.client_id}.admin",
                "logger": self._logger,
            }
            self._admin_client = ck_admin.AdminClient(conf)
        return self._admin_client

    def _producer(self, profile: DeliveryProfile) -> kafka_producer.ProfileProducer:
        producer = self._producers.get(profile)
        if producer is None:
            conf = kafka_producer.producer_config(
                profile,
                bootstrap=self.bootstrap,
                client_id=self.client_id,
                delivery_timeout_ms=self.delivery_timeout_ms,
                telemetry_linger_ms=self.telemetry_linger_ms,
                telemetry_batch_bytes=self.telemetry_batch_bytes,
                overrides=self.producer_overrides,
                logger=self._logger,
            )
            producer = kafka_producer.ProfileProducer(conf, poll_interval=self.poll_interval)
            self._producers[profile] = producer
        return producer

    async def _partition_counts(self, topics: set[str]) -> dict[str, int]:
        """Partition counts of ``topics``, read once per topic; undeclared ones are created."""
        missing = topics - self._partitions.keys()
        if missing:
            async with self._metadata_lock:
                missing = topics - self._partitions.keys()
                if missing:
                    await self._load_counts(missing)
        return {topic: self._partitions[topic] for topic in topics}

    async def _load_counts(self, topics: set[str]) -> None:
        states = await self.describe_topics(topics)
        for name in topics - states.keys():
            await kafka_topics.create_default(
                self._admin, name, bootstrap=self.bootstrap, timeout=self.request_timeout
            )
            self._partitions[name] = 1
        for name, state in states.items():
            self._partitions[name] = state.partitions

    def _learn(self, statuses: Iterable[TopicStatus]) -> None:
        for status in statuses:
            self._profiles[status.name] = status.spec.profile
            if status.actual is not None:
                self._partitions[status.name] = status.actual.partitions

    def _forget_consumer(self, member: KafkaConsumer) -> None:
        if member in self._consumers:
            self._consumers.remove(member)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("broker is closed")
