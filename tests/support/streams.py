"""Stream groups for tests: a recording stream handler, a one-group pipeline, raw publishing."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from aigc_hub.messaging.base import Broker, OutgoingMessage, Record
from aigc_hub.messaging.catalog import DAY_MS, TopicSpec
from aigc_hub.pipeline import Pipeline, StreamHandler

PIPELINE = "streamtest"
PARTITIONS = 4


def fresh(prefix: str) -> str:
    """A name no other test uses (the Kafka cluster is shared by the session)."""
    return f"{prefix}.{uuid.uuid4().hex[:8]}"


@dataclass
class Recorder:
    """A stream handler noting every batch it is handed and when; it can hold calls that
    carry records at a gate (ticks pass) and fail the first ``fail_batches`` of them."""

    fail_batches: int = 0
    gate: asyncio.Event | None = None
    calls: list[list[Record]] = field(default_factory=list)
    called_at: list[float] = field(default_factory=list)
    returned_at: list[float] = field(default_factory=list)
    #: The batches whose call returned (ticks included).
    done: list[list[Record]] = field(default_factory=list)
    failed: int = 0

    async def __call__(self, records: Sequence[Record]) -> None:
        """Note the batch; wait at the gate; raise while failures are due; else return."""
        self.calls.append(list(records))
        self.called_at.append(time.monotonic())
        if records and self.gate is not None:
            await self.gate.wait()
        if records and self.failed < self.fail_batches:
            self.failed += 1
            raise ConnectionError("analytics store unreachable")
        self.returned_at.append(time.monotonic())
        self.done.append(list(records))

    def batches(self) -> list[list[Record]]:
        """The calls that carried records (empty ticks left out)."""
        return [batch for batch in self.calls if batch]

    def handled(self) -> list[tuple[int, int]]:
        """(partition, offset) of every record handed over, in the order handed."""
        return [(r.partition, r.offset) for batch in self.calls for r in batch]


def stream_pipeline(
    topic: str,
    group: str,
    handler: StreamHandler,
    *,
    max_records: int = 5000,
    max_wait_s: float = 0.2,
) -> Pipeline[None]:
    """A pipeline owning telemetry topic ``topic`` and stream group ``group`` on it."""
    pipeline: Pipeline[None] = Pipeline(PIPELINE)
    pipeline.topic(TopicSpec(topic, PARTITIONS, DAY_MS, profile="telemetry", pipeline=PIPELINE))
    pipeline.stream(group, [topic], max_records=max_records, max_wait_s=max_wait_s)(handler)
    return pipeline


async def publish(broker: Broker, topic: str, n: int, *, start: int = 0) -> None:
    """``n`` raw records (no envelope: the telemetry road) spread over keys."""
    await broker.publish(
        [
            OutgoingMessage(topic, f"node-{i % 7}", f"play {i}".encode())
            for i in range(start, start + n)
        ]
    )


async def lag_of(broker: Broker, group: str, topic: str) -> int:
    """The group's lag on ``topic``, summed over partitions, as the broker reports it."""
    return sum(p.lag for p in await broker.lag(group, [topic]))


async def discard(records: Sequence[Record]) -> None:
    """A sink that keeps nothing: tests of worker processes watch the committed offsets."""


#: Topic and stream group of :data:`worker_pipeline`.
WORKER_TOPIC = "test.playback"
WORKER_GROUP = "stream-test-sink"
#: A stream group for ``aigc-hub worker`` in a subprocess
#: (``AIGC_HUB_PIPELINES=tests.support.streams:worker_pipeline``).
worker_pipeline = stream_pipeline(WORKER_TOPIC, WORKER_GROUP, discard, max_wait_s=0.05)
