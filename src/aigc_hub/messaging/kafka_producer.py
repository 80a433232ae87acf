"""Kafka producers for the two delivery profiles, with acknowledgements awaited from asyncio.

confluent-kafka's asyncio producer refuses headers, so each profile gets a sync ``Producer``
and a daemon thread that polls it; delivery reports complete an asyncio future through
``loop.call_soon_threadsafe``, once per published batch. Profiles (seed 000 §9.3.1):
``reliable`` is ``acks=all`` with idempotence (retries bounded only by
``delivery.timeout.ms``, order kept across retries); ``telemetry`` is ``acks=1``,
``linger.ms=5``, 64 KB batches, no idempotence (at-most-once road, never billing).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import confluent_kafka as ck

from aigc_hub.core.errors import RetryableError
from aigc_hub.messaging.base import DeliveryProfile, OutgoingMessage

log = logging.getLogger(__name__)


class PublishFailed(RetryableError):
    """Kafka did not acknowledge every message of a publish."""


def producer_config(
    profile: DeliveryProfile,
    *,
    bootstrap: str,
    client_id: str,
    delivery_timeout_ms: int,
    telemetry_linger_ms: int,
    telemetry_batch_bytes: int,
    overrides: Mapping[str, Any],
    logger: logging.Logger,
) -> dict[str, Any]:
    """The librdkafka settings of one delivery profile; ``overrides`` win."""
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "client.id": f"{client_id}.{profile}",
        "logger": logger,
    }
    if profile == "reliable":
        conf |= {
            "acks": "all",
            "enable.idempotence": True,
            "delivery.timeout.ms": delivery_timeout_ms,
        }
    else:
        conf |= {
            "acks": 1,
            "enable.idempotence": False,
            "linger.ms": telemetry_linger_ms,
            "batch.size": telemetry_batch_bytes,
            "delivery.timeout.ms": delivery_timeout_ms,
        }
    return conf | dict(overrides)


class _Acks:
    """Counts the delivery reports of one batch; completes its future after the last."""

    def __init__(self, loop: asyncio.AbstractEventLoop, pending: int) -> None:
        self.loop = loop
        self.done: asyncio.Future[None] = loop.create_future()
        self.pending = pending
        self.errors: list[ck.KafkaError] = []
        self._lock = threading.Lock()

    def report(self, err: ck.KafkaError | None, _msg: ck.Message | None = None) -> None:
        """A delivery report (any thread)."""
        with self._lock:
            if err is not None:
                self.errors.append(err)
            self.pending -= 1
            finished = self.pending == 0
        if finished:
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits
                self.loop.call_soon_threadsafe(self._finish)

    def _finish(self) -> None:
        if not self.done.done():
            self.done.set_result(None)


class ProfileProducer:
    """One profile's ``Producer`` and its poll thread; ``send`` may be called from any task."""

    def __init__(self, conf: Mapping[str, Any], *, poll_interval: float = 0.05) -> None:
        self.name = str(conf.get("client.id", "producer"))
        self._producer = ck.Producer(dict(conf))
        self._poll_interval = poll_interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name=f"{self.name}-poll", daemon=True)
        self._thread.start()

    async def send(self, batch: Sequence[tuple[OutgoingMessage, int]]) -> None:
        """Produce ``(message, partition)`` pairs in order; return when all are acknowledged.

        Raises :class:`PublishFailed` naming the first error when any message was not
        acknowledged (the others may have been written: publishing is at-least-once).
        """
        if not batch:
            return
        acks = _Acks(asyncio.get_running_loop(), len(batch))
        for i, (msg, partition) in enumerate(batch):
            try:
                await self._produce(msg, partition, acks)
            except ck.KafkaException as exc:
                for _ in batch[i:]:  # never produced: report them failed, then wait for the rest
                    acks.report(exc.args[0])
                break
        await acks.done
        if acks.errors:
            first = acks.errors[0]
            raise PublishFailed(
                f"{len(acks.errors)} of {len(batch)} messages not acknowledged by Kafka "
                f"({self.name}): {first.name()}: {first.str()}"
            )

    async def _produce(self, msg: OutgoingMessage, partition: int, acks: _Acks) -> None:
        headers: list[tuple[str, str | bytes | None]] | None = None
        if msg.headers:
            headers = [(k, v.encode()) for k, v in msg.headers.items()]
        key = msg.key.encode() if msg.key is not None else None
        while True:
            try:
                self._producer.produce(
                    msg.topic,
                    value=msg.value,
                    key=key,
                    partition=partition,
                    headers=headers,
                    on_delivery=acks.report,
                )
                return
            except BufferError:  # local queue full: let the poll thread drain it
                await asyncio.sleep(0.005)

    async def close(self, timeout: float) -> None:
        """Flush within ``timeout`` s; what is still queued then fails its publish."""
        left = await asyncio.to_thread(self._producer.flush, timeout)
        self._stop.set()
        await asyncio.to_thread(self._thread.join)
        if left:
            log.warning("%s: %d messages undelivered at close", self.name, left)
            self._producer.purge()
            self._producer.poll(0)  # fail their publishes

    def _poll(self) -> None:
        while not self._stop.is_set():
            try:
                self._producer.poll(self._poll_interval)
            except Exception:  # a callback raised: keep serving the others
                log.exception("%s: delivery report failed", self.name)
