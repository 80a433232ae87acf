"""The outbox relay: publish committed, unpublished outbox rows, then mark them published.

Claiming: on PostgreSQL, ``FOR UPDATE SKIP LOCKED`` lets several relays share the table; a
relay publishes a key's rows only when no older unpublished row of that key is held by
another relay, so per-key order survives concurrency. On SQLite one relay at a time holds a
lease (the single-claimer scheme) and reads without taking the write lock while publishing.
Never a high-water mark: a row whose transaction commits late is still picked up, because
the relay always asks for ``published_at IS NULL``. Publishing may repeat after a crash
between publish and mark; consumers' inboxes absorb that.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from aigc_hub.core import ids
from aigc_hub.core.clock import Clock
from aigc_hub.core.failpoints import NONE, Failpoints
from aigc_hub.messaging.base import Broker, OutgoingMessage
from aigc_hub.observability import metrics
from aigc_hub.reliability.leases import DatabaseLeases
from aigc_hub.store import tables
from aigc_hub.store.dialects import dialect_of
from aigc_hub.store.engine import reader

log = logging.getLogger(__name__)
OUTBOX = tables.outbox
LEASE_NAME = "outbox-relay"


@dataclass(frozen=True)
class RelayStats:
    """What one relay pass did."""

    published: int
    skipped_for_order: int = 0


class Relay:
    """Moves outbox rows to the broker in id order per key; one pass at a time per instance."""

    def __init__(
        self,
        engine: AsyncEngine,
        broker: Broker,
        clock: Clock,
        *,
        batch_size: int = 500,
        idle_interval: float = 0.05,
        linger: float = 0.005,
        lease_ttl_ms: int = 10_000,
        failpoints: Failpoints = NONE,
        name: str | None = None,
    ) -> None:
        self.engine = engine
        self.broker = broker
        self.clock = clock
        self.batch_size = batch_size
        self.idle_interval = idle_interval
        self.linger = linger
        self.lease_ttl_ms = lease_ttl_ms
        self.failpoints = failpoints
        self.name = name or f"relay-{ids.new_id_str()[-12:]}"
        self._wake = asyncio.Event()
        self._leases = DatabaseLeases(engine, clock)
        self._lease_until = 0
        self.published_total = 0

    def wake(self) -> None:
        """Ask the relay to look now (called after a transaction that wrote outbox rows)."""
        self._wake.set()

    async def run_once(self) -> RelayStats:
        """Publish at most one batch; returns how many rows were published."""
        if dialect_of(self.engine).skip_locked:
            return await self._pass_skip_locked()
        return await self._pass_single_claimer()

    async def drain(self) -> int:
        """Publish until the outbox has nothing left that this relay may publish."""
        total = 0
        while True:
            stats = await self.run_once()
            total += stats.published
            if stats.published == 0:
                return total

    async def run(self, stop: asyncio.Event) -> None:
        """Publish continuously until ``stop`` is set; waits on wake-ups or a short poll."""
        while not stop.is_set():
            try:
                stats = await self.run_once()
            except Exception:
                log.exception("relay pass failed; retrying")
                stats = RelayStats(0)
                await asyncio.sleep(min(1.0, self.idle_interval * 10))
            if stats.published >= self.batch_size:
                continue
            self._wake.clear()
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.idle_interval):
                    await self._wake.wait()
            if self._wake.is_set() and self.linger and stats.published > 1:
                # Busy (the last pass found several rows): let a burst of commits gather so
                # one pass publishes them together. Idle: publish at once, for latency.
                await asyncio.sleep(self.linger)
        with contextlib.suppress(Exception):
            await self._leases.release(LEASE_NAME, self.name)

    # -- SQLite: one claimer at a time ------------------------------------------------------

    async def _pass_single_claimer(self) -> RelayStats:
        now = self.clock.now_ms()
        if now >= self._lease_until - self.lease_ttl_ms // 2:
            token = await self._leases.acquire(LEASE_NAME, self.name, self.lease_ttl_ms)
            if token is None:
                if self._lease_until:
                    metrics.LEASE_LOSSES.labels(LEASE_NAME).inc()
                    self._lease_until = 0
                return RelayStats(0)
            if not self._lease_until:
                metrics.LEASE_ACQUISITIONS.labels(LEASE_NAME).inc()
            self._lease_until = now + self.lease_ttl_ms
        async with reader(self.engine) as conn:
            rows = (await conn.execute(self._unpublished().limit(self.batch_size))).all()
        if not rows:
            return RelayStats(0)
        await self._publish(rows)
        async with self.engine.begin() as conn:
            await self._mark(conn, [r.id for r in rows])
        return RelayStats(len(rows))

    # -- PostgreSQL: SKIP LOCKED, several relays ----------------------------------------------

    async def _pass_skip_locked(self) -> RelayStats:
        async with self.engine.begin() as conn:
            claimed = (
                await conn.execute(
                    self._unpublished().limit(self.batch_size).with_for_update(skip_locked=True)
                )
            ).all()
            if not claimed:
                return RelayStats(0)
            first_claimed: dict[str, int] = {}
            for row in claimed:
                first_claimed.setdefault(row.key, row.id)
            oldest = await conn.execute(
                sa.select(OUTBOX.c.key, sa.func.min(OUTBOX.c.id))
                .where(OUTBOX.c.published_at.is_(None), OUTBOX.c.key.in_(list(first_claimed)))
                .group_by(OUTBOX.c.key)
            )
            blocked = {k for k, min_id in oldest if min_id < first_claimed[k]}
            rows = [r for r in claimed if r.key not in blocked]
            if rows:
                await self._publish(rows)
                await self._mark(conn, [r.id for r in rows])
        return RelayStats(len(rows), skipped_for_order=len(claimed) - len(rows))

    # -- shared -------------------------------------------------------------------------------

    @staticmethod
    def _unpublished() -> sa.Select[tuple[int, str, str, bytes, dict[str, str]]]:
        return (
            sa.select(OUTBOX.c.id, OUTBOX.c.topic, OUTBOX.c.key, OUTBOX.c.value, OUTBOX.c.headers)
            .where(OUTBOX.c.published_at.is_(None))
            .order_by(OUTBOX.c.id)
        )

    async def _publish(
        self, rows: Sequence[sa.Row[tuple[int, str, str, bytes, dict[str, str]]]]
    ) -> None:
        messages = [
            OutgoingMessage(r.topic, r.key or None, r.value, dict(r.headers or {})) for r in rows
        ]
        with metrics.publishing(m.topic for m in messages):
            await self.broker.publish(messages)
        self.failpoints.hit("relay.after_publish")

    async def _mark(self, conn: AsyncConnection, row_ids: list[int]) -> None:
        await conn.execute(
            sa.update(OUTBOX)
            .where(OUTBOX.c.id.in_(row_ids))
            .values(published_at=self.clock.now_ms(), attempt_count=OUTBOX.c.attempt_count + 1)
        )
        self.published_total += len(row_ids)

    async def purge_published(self, older_than_ms: int) -> int:
        """Delete rows published before ``older_than_ms``; returns how many."""
        async with self.engine.begin() as conn:
            result = await conn.execute(
                sa.delete(OUTBOX)
                .where(OUTBOX.c.published_at.is_not(None), OUTBOX.c.published_at < older_than_ms)
                .returning(OUTBOX.c.id)
            )
            return len(result.all())
