"""The embedded log under telemetry load: keyed publishes, then consumer groups fetch and commit.

Each round publishes ``--records`` playback envelopes (orjson, ~250 bytes, keyed by avcc
code) in batches of ``--batch`` over ``--partitions`` partitions of one topic, then every
group (``--groups``) reads that round's records with ``fetch(--max-records)`` and commits
after each fetch. Publish and consume phases alternate on one file, so a round's consume
reads from a log that grew over the rounds before it, as a live log does. Prints records/s
per phase and round, then the median. Bounded in count and time; one temporary local file.

    python bench/embedded_log.py                           # 100,000 records a round, 3 rounds
    python bench/embedded_log.py --records 200000 --batch 5000 --groups 2 --rounds 5
    python bench/embedded_log.py --headers none            # records without envelope headers
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from aigc_hub.messaging import headers as std_headers
from aigc_hub.messaging.base import Consumer, OutgoingMessage, TopicPartition
from aigc_hub.messaging.catalog import TopicSpec
from aigc_hub.messaging.embedded import EmbeddedBroker

TOPIC = "topic.playback.event"  # as avcc's PLAYBACK_TOPIC (a bench imports no pipeline)
EVENT_TYPE = "avcc.playback.recorded"


def avcc_codes(count: int, rng: random.Random) -> list[str]:
    """``count`` codes shaped as seed 000 §9.2.4 shows them (``MA.156.10005.8361/…``)."""
    alphabet = "0123456789ABCDEFGHJKLMNPQRSTUVWXYZ"
    return [
        f"MA.156.{rng.randrange(10_000, 99_999)}.{rng.randrange(1_000, 9_999)}/"
        + "".join(rng.choices(alphabet, k=8))
        for _ in range(count)
    ]


def playback_messages(
    n: int, codes: Sequence[str], with_headers: bool, rng: random.Random
) -> list[OutgoingMessage]:
    """``n`` playback envelopes as the telemetry road publishes them, keyed by avcc code."""
    out = []
    now_ms = time.time_ns() // 1_000_000
    for i in range(n):
        code = rng.choice(codes)
        event_id = str(uuid.uuid4())
        event = rng.choice(("play", "play", "play", "complete", "purchase"))
        envelope = {
            "event_id": event_id,
            "event_type": EVENT_TYPE,
            "schema_version": 1,
            "timestamp": now_ms + i,
            "source": "gateway-svc",
            "key": code,
            "payload": {
                "avcc_code": code,
                "platform_node": f"{rng.randrange(10, 99_999):05d}",
                "user_hash": f"{rng.getrandbits(64):016x}",
                "event_type": event,
                "duration_sec": rng.randrange(0, 7_200),
                "revenue_cny": "12.50" if event == "purchase" else "0.00",
            },
        }
        headers = (
            std_headers.for_envelope(event_id, EVENT_TYPE, 1, None, None) if with_headers else {}
        )
        out.append(OutgoingMessage(TOPIC, code, orjson.dumps(envelope), headers))
    return out


@dataclass
class Phase:
    """One phase's figures: records/s of wall time, and CPU µs of this process per record
    (the second drifts less when other work shares the machine)."""

    rate: float
    cpu_us: float

    def __str__(self) -> str:
        return f"{self.rate:>9,.0f} records/s {self.cpu_us:5.1f} µs CPU/record"


class Clocks:
    """Wall and process CPU time since it was made."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def phase(self, records: int) -> Phase:
        wall, cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu
        return Phase(records / wall, cpu / records * 1e6)


async def publish_phase(
    broker: EmbeddedBroker, messages: Sequence[OutgoingMessage], batch: int
) -> Phase:
    """Publish ``messages`` in batches of ``batch``, one after another."""
    clocks = Clocks()
    for start in range(0, len(messages), batch):
        await broker.publish(messages[start : start + batch])
    return clocks.phase(len(messages))


async def consume_phase(
    consumer: Consumer, n: int, max_records: int, deadline: float
) -> Phase | None:
    """Fetch ``n`` records, committing each fetch's ends; None past ``deadline``."""
    clocks = Clocks()
    got = 0
    while got < n:
        if time.perf_counter() > deadline:
            print(f"  consume stopped at the time bound ({got}/{n})", file=sys.stderr)
            return None
        records = await consumer.fetch(max_records, 1.0)
        ends: dict[tuple[str, int], int] = {}
        for record in records:  # a partition's records come in offset order: the last wins
            ends[record.topic, record.partition] = record.offset + 1
        await consumer.commit({TopicPartition(t, p): end for (t, p), end in ends.items()})
        got += len(records)
    return clocks.phase(n)


def median(phases: Sequence[Phase]) -> Phase:
    """The median of each figure over rounds (0 when no round ran)."""
    if not phases:
        return Phase(0.0, 0.0)
    rate = statistics.median(p.rate for p in phases)
    return Phase(rate, statistics.median(p.cpu_us for p in phases))


async def run(args: argparse.Namespace, workdir: Path) -> None:
    rng = random.Random(args.seed)
    codes = avcc_codes(args.keys, rng)
    broker = EmbeddedBroker(workdir / "log.db", retention_interval=None)
    deadline = time.perf_counter() + args.max_seconds
    try:
        await broker.ensure_topics([TopicSpec(TOPIC, args.partitions, None)])
        consumers = [broker.consumer(f"bench-{g}", [TOPIC]) for g in range(args.groups)]
        for consumer in consumers:
            assert await consumer.fetch(1, 0) == []  # joins the group before the clock runs
        published: list[Phase] = []
        consumed: list[list[Phase]] = [[] for _ in consumers]
        for round_no in range(1, args.rounds + 1):
            if time.perf_counter() > deadline:
                print(f"stopped at the time bound before round {round_no}", file=sys.stderr)
                break
            messages = playback_messages(args.records, codes, args.headers == "envelope", rng)
            size = sum(len(m.value) for m in messages) / len(messages)
            phase = await publish_phase(broker, messages, args.batch)
            published.append(phase)
            print(f"round {round_no}: publish {phase} ({size:.0f} B values)", flush=True)
            for g, consumer in enumerate(consumers):
                got = await consume_phase(consumer, args.records, args.max_records, deadline)
                if got is None:
                    break
                consumed[g].append(got)
                print(f"round {round_no}: group {g} fetch+commit {got}", flush=True)
        print(f"median publish: {median(published)}")
        for g, phases in enumerate(consumed):
            print(f"median group {g} fetch+commit: {median(phases)}")
        for consumer in consumers:
            await consumer.close()
    finally:
        await broker.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000, help="records per round")
    parser.add_argument("--batch", type=int, default=2_000, help="records per publish call")
    parser.add_argument("--partitions", type=int, default=24)
    parser.add_argument("--keys", type=int, default=5_000, help="distinct avcc codes")
    parser.add_argument("--groups", type=int, default=1, help="consumer groups, each reads all")
    parser.add_argument("--max-records", type=int, default=5_000, help="fetch size")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--headers", choices=("envelope", "none"), default="envelope")
    parser.add_argument("--max-seconds", type=float, default=300.0, help="bound on the run")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    print(
        f"embedded log: {args.records:,} records a round, batches of {args.batch:,}, "
        f"{args.partitions} partitions, {args.groups} group(s), fetch {args.max_records:,}, "
        f"headers {args.headers}"
    )
    with tempfile.TemporaryDirectory(prefix="aigc-hub-bench-") as workdir:
        asyncio.run(run(args, Path(workdir)))


if __name__ == "__main__":
    main()
