"""Playback traffic for the detector's tests and bench: a clean stream of several codes in
event time (Poisson plays per window, completions and purchases drawn from them), and
anomalies planted into chosen windows. Seeded, so every run draws the same stream."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import orjson

from aigc_hub.messaging.base import OutgoingMessage
from aigc_hub.pipelines.avcc import events

T0_MS = 1_767_225_600_000
NODES = ("8361", "8362", "8363")
#: Codes and their mean plays per 1 s window (from a rarely played work to a popular one).
RATES = {
    "MA.156.10005.8361/0000001A": 6.0,
    "MA.156.10005.8361/0000002B": 15.0,
    "MA.156.10005.8362/0000003C": 25.0,
    "MA.156.10005.8362/0000004D": 40.0,
    "MA.156.10005.8363/0000005E": 70.0,
}
CODES = tuple(RATES)
COMPLETE_RATE = 0.6
PURCHASE_RATE = 0.04


def envelope(ts_ms: int, code: str, node: str, user: str, kind: str, revenue: float = 0.0) -> bytes:
    """One record value: the seed's envelope (§9.2) around a §9.2.4 payload, compact JSON."""
    payload = {
        "avcc_code": code,
        "platform_node": node,
        "user_hash": user,
        "event_type": kind,
        "duration_sec": 1800 if kind == "complete" else 0,
        "revenue_cny": revenue,
    }
    body = {
        "event_id": str(uuid.uuid4()),
        "timestamp": ts_ms,
        "source": events.GATEWAY_SVC,
        "payload": payload,
    }
    return orjson.dumps(body)


@dataclass
class Plan:
    """What to plant in which window (index from the first window)."""

    #: window -> (code, multiple of its rate) for a play spike (completions and purchases
    #: keep their rates, so only the play count is off).
    spikes: dict[int, tuple[str, float]] = field(default_factory=dict)
    #: window -> (user hash, node, events) for one user hash flooding.
    floods: dict[int, tuple[str, str, int]] = field(default_factory=dict)
    #: window -> code whose completions collapse to none.
    collapses: dict[int, str] = field(default_factory=dict)
    #: window -> (code, CNY) for one purchase far out of range.
    big_purchases: dict[int, tuple[str, float]] = field(default_factory=dict)


class Traffic:
    """Draws window after window of playback records for :data:`RATES`."""

    def __init__(self, seed: int, *, t0_ms: int = T0_MS, width_ms: int = 1000) -> None:
        self.rng = np.random.default_rng(seed)
        self.t0_ms = t0_ms
        self.width_ms = width_ms
        self.users = [f"sha256:u{seed}-{i:05d}" for i in range(5000)]

    def window_start(self, index: int) -> int:
        """Epoch ms at which window ``index`` starts."""
        return self.t0_ms + index * self.width_ms

    def window(self, index: int, plan: Plan | None = None) -> list[OutgoingMessage]:
        """The records of window ``index`` (clean, plus what ``plan`` plants there), keyed by
        code and shuffled within the window as nodes' clocks and networks would."""
        plan = plan or Plan()
        rng = self.rng
        drawn: list[tuple[str, str, float, str | None, str | None]] = []
        for code, rate in RATES.items():
            multiple = plan.spikes[index][1] if plan.spikes.get(index, ("",))[0] == code else 1
            plays = int(rng.poisson(rate * multiple))
            completes = int(rng.binomial(plays, COMPLETE_RATE))
            if plan.collapses.get(index) == code:
                completes = 0
            purchases = int(rng.binomial(plays, PURCHASE_RATE))
            drawn += [(code, "play", 0.0, None, None)] * plays
            drawn += [(code, "complete", 0.0, None, None)] * completes
            for price in rng.uniform(3, 30, purchases):
                drawn.append((code, "purchase", round(float(price), 2), None, None))
        if index in plan.floods:
            user, node, count = plan.floods[index]
            drawn += [(CODES[i % len(CODES)], "play", 0.0, user, node) for i in range(count)]
        if index in plan.big_purchases:
            code, cny = plan.big_purchases[index]
            drawn.append((code, "purchase", cny, None, None))
        n = len(drawn)
        offsets = rng.integers(0, self.width_ms, n).tolist()
        users = rng.integers(0, len(self.users), n).tolist()
        nodes = rng.integers(0, len(NODES), n).tolist()
        start = self.window_start(index)
        messages = [
            OutgoingMessage(
                events.PLAYBACK_TOPIC,
                code,
                envelope(
                    start + offsets[i],
                    code,
                    node or NODES[nodes[i]],
                    user or self.users[users[i]],
                    kind,
                    revenue,
                ),
            )
            for i, (code, kind, revenue, user, node) in enumerate(drawn)
        ]
        return [messages[i] for i in rng.permutation(n).tolist()]

    def windows(self, count: int, plan: Plan | None = None) -> Iterator[list[OutgoingMessage]]:
        """Windows 0 .. count-1, one list of records each."""
        for index in range(count):
            yield self.window(index, plan)
