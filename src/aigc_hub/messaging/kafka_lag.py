"""A consumer group's lag on Kafka: committed offsets, end offsets, oldest unconsumed record.

Committed offsets come from the group coordinator (``list_consumer_group_offsets``), end
offsets from ``list_offsets(latest)``, both in one request each. The append time of the
oldest unconsumed record is read with a short-lived consumer that joins no group (assign,
read one record per lagging partition, close): one fetch per lagging partition, a fair
price for a monitor. On Tansu the high watermark is the base offset of the partition's last
record batch plus one, so the end offset (and the lag) is approximate there unless every
record is produced in its own batch (``batch.num.messages=1``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

import confluent_kafka as ck
from confluent_kafka import admin as ck_admin
from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]  # not in __all__

from aigc_hub.messaging import kafka_topics
from aigc_hub.messaging.base import PartitionLag, TopicPartition


async def read(
    admin: ck_admin.AdminClient,
    probe_conf: Mapping[str, Any],
    group: str,
    topics: Sequence[str],
    *,
    bootstrap: str,
    timeout: float,
) -> list[PartitionLag]:
    """Lag of ``group`` per existing partition of ``topics``, in their order, then by partition.

    A group that never committed on a partition is at offset 0.
    """
    names = list(dict.fromkeys(topics))
    try:
        metadata = await asyncio.to_thread(admin.list_topics, timeout=timeout)
    except ck.KafkaException as exc:
        raise kafka_topics.unavailable(exc, bootstrap) from None
    tps = [
        TopicPartition(name, p)
        for name in names
        if name in metadata.topics and metadata.topics[name].error is None
        for p in sorted(metadata.topics[name].partitions)
    ]
    if not tps:
        return []
    kafka_tps = [ck.TopicPartition(tp.topic, tp.partition) for tp in tps]
    try:
        request = [ck.ConsumerGroupTopicPartitions(group, kafka_tps)]
        answer = admin.list_consumer_group_offsets(request, request_timeout=timeout)
        listed = await asyncio.wrap_future(answer[group])
        committed = {
            TopicPartition(k.topic, k.partition): max(k.offset, 0)
            for k in listed.topic_partitions or []
        }
        latest = {k: OffsetSpec.latest() for k in kafka_tps}  # type: ignore[no-untyped-call]
        ends: dict[TopicPartition, int] = {}
        for k, future in admin.list_offsets(latest, request_timeout=timeout).items():
            ends[TopicPartition(k.topic, k.partition)] = (await asyncio.wrap_future(future)).offset
    except ck.KafkaException as exc:
        raise kafka_topics.unavailable(exc, bootstrap) from None
    finally:
        admin.poll(0)  # serve queued client logs
    behind = {tp: committed.get(tp, 0) for tp in tps if committed.get(tp, 0) < ends[tp]}
    oldest = (
        await asyncio.to_thread(first_timestamps, probe_conf, behind, timeout) if behind else {}
    )
    return [
        PartitionLag(group, tp.topic, tp.partition, committed.get(tp, 0), ends[tp], oldest.get(tp))
        for tp in tps
    ]


def first_timestamps(
    conf: Mapping[str, Any], start: Mapping[TopicPartition, int], timeout: float
) -> dict[TopicPartition, int]:
    """Append time of the first record at or after ``start`` per partition (blocking).

    A partition whose offset fell below the log start reads from the oldest record left;
    a partition with nothing to read within ``timeout`` s is left out.
    """
    probe = ck.Consumer(
        dict(conf)
        | {
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    found: dict[TopicPartition, int] = {}
    try:
        probe.assign([ck.TopicPartition(tp.topic, tp.partition, off) for tp, off in start.items()])
        pending = set(start)
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for msg in probe.consume(len(pending), 0.05):
                tp = TopicPartition(str(msg.topic()), int(msg.partition() or 0))
                err = msg.error()
                if err is None and tp in pending:
                    found[tp] = msg.timestamp()[1]
                if err is None or err.code() == ck.KafkaError._PARTITION_EOF:
                    pending.discard(tp)
    finally:
        probe.close()
    return found
