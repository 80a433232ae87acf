"""Playback records as gateway-svc publishes them (seed 000 §9.2.4's envelope, compact JSON,
keyed by code) and seeded batches of them, for the analytics tests."""

from __future__ import annotations

import random
import uuid
from decimal import Decimal

import orjson

from aigc_hub.messaging.base import Record
from aigc_hub.pipelines.avcc.events import PLAYBACK_TOPIC

START_MS = 1_767_225_600_000
CODES = tuple(f"MA.156.10005.8361/0000{n:04d}X" for n in range(7))


def playback_value(
    *,
    code: str = CODES[0],
    event_type: str = "play",
    ts: int = START_MS,
    revenue: Decimal = Decimal("0.00"),
    duration_sec: int = 60,
    node: str = "8361",
) -> bytes:
    """One event's value: ``revenue_cny`` a JSON number with two decimals (``12.5``)."""
    envelope = {
        "event_id": str(uuid.uuid4()),
        "timestamp": ts,
        "source": "gateway-svc",
        "payload": {
            "avcc_code": code,
            "platform_node": node,
            "user_hash": "sha256:user123",
            "event_type": event_type,
            "duration_sec": duration_sec,
            "revenue_cny": float(revenue),
        },
    }
    return orjson.dumps(envelope)


def record(partition: int, offset: int, value: bytes, key: str | None = CODES[0]) -> Record:
    """A record of the playback topic at ``partition``/``offset``."""
    return Record(
        PLAYBACK_TOPIC, partition, offset, key, value, {"source": "gateway-svc"}, START_MS
    )


def seeded_events(n: int, seed: int, partitions: int = 4) -> list[tuple[Record, str, Decimal]]:
    """``n`` records over ``partitions`` partitions (offsets in order per partition), each
    with its event type and revenue; purchases carry amounts whose float sum is not exact."""
    rng = random.Random(seed)
    next_offset = [0] * partitions
    out: list[tuple[Record, str, Decimal]] = []
    for i in range(n):
        kind = rng.choice(("play", "play", "play", "complete", "purchase"))
        revenue = Decimal(rng.randrange(1, 100_000)) / 100 if kind == "purchase" else Decimal(0)
        code = rng.choice(CODES)
        value = playback_value(
            code=code,
            event_type=kind,
            ts=START_MS + i * 250,
            revenue=revenue.quantize(Decimal("0.01")),
        )
        partition = rng.randrange(partitions)
        out.append((record(partition, next_offset[partition], value, code), kind, revenue))
        next_offset[partition] += 1
    return out
