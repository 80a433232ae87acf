"""Outbox-age scanner: unpublished rows older than a threshold mean the relay is stuck or dead.

It exports the backlog and the oldest row's age, and recovers by running relay passes itself.
On SQLite those passes take the relay lease, so while a live relay holds it they publish
nothing (the finding is recorded as "relay-alive"); when the relay died, the lease has
expired and the scanner publishes the backlog. On PostgreSQL relays share the table with
``SKIP LOCKED``, so the scanner's pass simply helps.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aigc_hub.core.clock import Clock
from aigc_hub.observability import metrics
from aigc_hub.reliability.relay import Relay
from aigc_hub.reliability.scanners import Finding
from aigc_hub.store import tables
from aigc_hub.store.engine import reader

OUTBOX = tables.outbox


class OutboxAgeScanner:
    """Finds outbox rows unpublished for longer than ``max_age_s`` and republishes them."""

    name = "outbox-age"

    def __init__(
        self,
        engine: AsyncEngine,
        relay: Relay,
        clock: Clock,
        *,
        max_age_s: float = 60.0,
        interval_s: float = 30.0,
        max_passes: int = 20,
    ) -> None:
        self.engine = engine
        self.relay = relay
        self.clock = clock
        self.max_age_s = max_age_s
        self.interval_s = interval_s
        self.max_passes = max_passes

    async def backlog(self) -> tuple[int, float]:
        """(unpublished rows, age in seconds of the oldest one); also sets the gauges."""
        async with reader(self.engine) as conn:
            count, oldest = (
                await conn.execute(
                    sa.select(sa.func.count(), sa.func.min(OUTBOX.c.created_at)).where(
                        OUTBOX.c.published_at.is_(None)
                    )
                )
            ).one()
        age = 0.0 if oldest is None else max(0.0, (self.clock.now_ms() - int(oldest)) / 1000)
        metrics.OUTBOX_UNPUBLISHED.set(int(count))
        metrics.OUTBOX_OLDEST_AGE.set(age)
        return int(count), age

    async def find(self, now_ms: int) -> Sequence[Finding]:
        """One finding when the oldest unpublished row is older than the threshold."""
        count, age = await self.backlog()
        if count == 0 or age <= self.max_age_s:
            return []
        return [Finding("outbox", {"backlog": count, "oldest_age_s": round(age, 1)})]

    async def repair(self, finding: Finding, now_ms: int) -> str:
        """Run relay passes: "republished" if rows moved, "relay-alive" if a relay holds them."""
        published = 0
        for _ in range(self.max_passes):
            stats = await self.relay.run_once()
            published += stats.published
            if stats.published == 0:
                break
        finding.detail["republished"] = published
        await self.backlog()
        return "republished" if published else "relay-alive"
