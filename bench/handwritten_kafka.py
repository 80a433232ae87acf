"""The baseline a team would write by hand: confluent-kafka + psycopg, one commit per message.

Produce N keyed messages with ``acks=all`` and idempotence; a consumer inserts each with
``INSERT … ON CONFLICT DO NOTHING`` in its own PostgreSQL transaction, then commits the
message's offset synchronously. No outbox (the produce is not atomic with any fact), no inbox
(a crash between the insert and the offset commit replays the message; the idempotent insert
hides that for this one effect, but not for effects that are not idempotent).

    python bench/handwritten_kafka.py --bootstrap 127.0.0.1:9092 --database-url postgresql://…
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from dataclasses import dataclass

import psycopg
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic


@dataclass(frozen=True)
class Figures:
    """What the baseline measured."""

    produced_per_s: float
    drained_per_s: float
    n: int


def _make_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, num_partitions=partitions, replication_factor=1)
    futures = admin.create_topics([new])
    for fut in futures.values():
        fut.result(30)


def run(
    bootstrap: str,
    database_url: str,
    *,
    n: int = 20_000,
    partitions: int = 12,
    consumer_config: dict[str, str] | None = None,
    max_seconds: float = 300.0,
) -> Figures:
    """Produce ``n`` messages, then consume them one commit per message; bounded in time."""
    run_id = uuid.uuid4().hex[:8]
    topic = f"bench.handwritten.{run_id}"
    _make_topic(bootstrap, topic, partitions)
    dsn = database_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_handwritten_effects")
        conn.execute(
            "CREATE TABLE bench_handwritten_effects (task_id text PRIMARY KEY, applied_at bigint)"
        )

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
    produced_s = time.perf_counter() - started

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
    done = 0
    started = time.perf_counter()
    with psycopg.connect(dsn) as conn:
        while done < n and time.perf_counter() - started < max_seconds:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            payload = json.loads(msg.value())
            conn.execute(
                "INSERT INTO bench_handwritten_effects VALUES (%s, %s) ON CONFLICT DO NOTHING",
                (payload["task_id"], time.time_ns()),
            )
            conn.commit()
            consumer.commit(message=msg, asynchronous=False)
            done += 1
    drained_s = time.perf_counter() - started
    consumer.close()
    return Figures(n / produced_s, done / drained_s, done)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--database-url", required=True)
    ap.add_argument("--tasks", type=int, default=20_000)
    args = ap.parse_args()
    figures = run(args.bootstrap, args.database_url, n=args.tasks)
    print(
        f"hand-written: produce {figures.produced_per_s:,.0f}/s, drain "
        f"{figures.drained_per_s:,.0f} tasks/s ({figures.n} tasks)"
    )


if __name__ == "__main__":
    main()
