"""A hub with the generation pipeline on the fake provider: memory broker, manual clock, a
real database and blob store, and no media tools.

Nothing runs on its own time: :meth:`FakeGeneration.settle` publishes the outbox and waits
until every consumer group has handled everything; scanners run when a test calls
:meth:`FakeGeneration.scan`, and time moves when it calls :meth:`FakeGeneration.advance`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import sqlalchemy as sa

from aigc_hub.blobs.local import LocalBlobStore
from aigc_hub.bootstrap import Hub
from aigc_hub.core.clock import ManualClock
from aigc_hub.hub_config import HubConfig
from aigc_hub.messaging.base import Broker, RebalanceCallback
from aigc_hub.messaging.memory import MemoryConsumer
from aigc_hub.pipelines.generation import services
from aigc_hub.pipelines.generation.models import generation_tasks, task_events
from aigc_hub.pipelines.generation.pipeline import pipeline as generation
from aigc_hub.pipelines.generation.settings import GenerationSettings
from aigc_hub.pipelines.generation.state import STATE, Generation, build
from aigc_hub.reliability.breaker import CircuitBreaker
from aigc_hub.reliability.notifications import pipeline as notifications
from aigc_hub.store import engine as store_engine
from aigc_hub.store.engine import reader
from aigc_hub.store.tables import dead_letters, outbox, redeliveries
from aigc_hub.testing import FAKE_MODEL, FakeProbe, FakeProvider, MemoryBroker
from tests.support.hubs import DoublePublisher

TENANT = "tenant-fake"
WEBHOOK_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

#: Deadlines the tests step over with the manual clock (seconds).
SETTINGS: dict[str, Any] = {
    "providers": "local",  # unused: the fake adapters are installed instead
    "callback_base_url": "http://127.0.0.1:9",
    "local_webhook_secrets": WEBHOOK_SECRET,
    "poll_first_s": 1.0,
    "poll_max_s": 4.0,
    "poll_rate_per_s": 1000.0,
    "unknown_recheck_s": 10.0,
    "dispatching_deadline_s": 30.0,
    "running_silence_s": 60.0,
    "fetch_deadline_s": 60.0,
    "cancel_deadline_s": 30.0,
    "queued_deadline_s": 600.0,
    # The fake provider's outputs are fake videos (FakeProbe reads them, FFmpeg cannot): no
    # variant is required and no frame reviewed, so POST_PROCESSING ends at once.
    "media_profiles": "",
    "output_review": False,
}


@dataclass
class FakeGeneration:
    hub: Hub
    broker: MemoryBroker
    clock: ManualClock
    provider: FakeProvider
    probe: FakeProbe

    @property
    def gen(self) -> Generation:
        """The pipeline's state in this hub."""
        return self.hub.state_of(STATE)

    @property
    def settings(self) -> GenerationSettings:
        """The pipeline's settings in this hub."""
        return self.gen.settings

    def close_breakers(self) -> None:
        """Close every provider's circuit, as on a fresh hub (scenarios sharing one hub would
        otherwise inherit the breaker that earlier failing submits opened)."""
        providers = self.gen.providers
        for name in providers.breakers:
            providers.breakers[name] = CircuitBreaker()

    async def held_slots(self) -> int:
        """How many platform slot permits are held now (each active attempt holds one)."""
        slots = self.gen.slots
        names = [f"slot:platform:{n}" for n in range(slots.limits["platform"])]
        return sum([await slots.leases.holder(name) is not None for name in names])

    async def create(self, prompt: str, *, duration_s: int = 2) -> str:
        """Create a task of the fake model (not yet dispatched); returns its id."""
        body = services.CreateTask(
            model=FAKE_MODEL, prompt=prompt, duration_s=duration_s, resolution="320x180"
        )
        task = await services.create_task(
            self.gen, tenant_id=TENANT, body=body, idempotency_key=prompt
        )
        return str(task["task_id"])

    async def settle(self) -> None:
        """Publish the outbox and let every group handle it, until nothing more happens."""
        for _ in range(100):
            await self.broker.drain(timeout=20)  # handlers done, their events in the outbox
            # A pass that publishes nothing may only have waited for an older row of a key
            # (PostgreSQL commits out of id order): done when nothing is left unpublished.
            if await self.hub.relay.drain() == 0 and not await self._unpublished():
                await self._assert_nothing_failed()
                return
        raise AssertionError("the hub kept producing events for 100 rounds")

    async def _unpublished(self) -> int:
        async with reader(self.hub.engine) as conn:
            count = await conn.execute(
                sa.select(sa.func.count()).where(outbox.c.published_at.is_(None))
            )
            return int(count.scalar_one())

    async def _assert_nothing_failed(self) -> None:
        """A handler that gave up (dead letter) or parked an event would end a scenario
        early without a word: say so instead."""
        async with reader(self.hub.engine) as conn:
            dead = (
                await conn.execute(sa.select(dead_letters.c.consumer, dead_letters.c.error_message))
            ).all()
            parked = (
                await conn.execute(sa.select(redeliveries.c.consumer, redeliveries.c.error_message))
            ).all()
        assert not dead, f"dead letters: {[tuple(r) for r in dead]}"
        assert not parked, f"parked events: {[tuple(r) for r in parked]}"

    async def pump_until(self, check: Callable[[], bool], timeout_s: float = 10.0) -> None:
        """Publish the outbox until ``check()`` holds (for a handler left waiting on the clock,
        which :meth:`settle` would wait for in vain)."""
        deadline = time.monotonic() + timeout_s
        while not check():
            if time.monotonic() > deadline:
                raise AssertionError(f"not reached within {timeout_s} s")
            await self.hub.relay.drain()
            await asyncio.sleep(0.01)

    async def advance_until(
        self, check: Callable[[], bool], step_s: float = 1.0, timeout_s: float = 10.0
    ) -> None:
        """Move the clock ``step_s`` at a time until ``check()`` holds (wakes a handler
        waiting out a ``Retry`` whatever instant its wait began)."""
        deadline = time.monotonic() + timeout_s
        while not check():
            if time.monotonic() > deadline:
                raise AssertionError(f"not reached within {timeout_s} s")
            await self.clock.advance(step_s)
            await asyncio.sleep(0.01)

    async def advance(self, seconds: float) -> None:
        """Move the manual clock (scanners see the new time when they next run)."""
        await self.clock.advance(seconds)

    async def scan(self, name: str) -> list[str]:
        """One pass of the named scanner (find, then repair each finding); its results."""
        (scanner,) = [s for s in self.hub.scanners() if s.name == name]
        now = self.clock.now_ms()
        return [await scanner.repair(f, now) for f in await scanner.find(now)]

    async def task(self, task_id: str) -> dict[str, Any]:
        """The task row."""
        async with reader(self.hub.engine) as conn:
            row = (
                await conn.execute(
                    sa.select(generation_tasks).where(generation_tasks.c.id == task_id)
                )
            ).one()
        return dict(row._mapping)

    async def status(self, task_id: str) -> str:
        """The task's status."""
        return str((await self.task(task_id))["status"])

    async def path(self, task_id: str) -> list[str]:
        """The task's statuses in the order its history recorded them."""
        async with reader(self.hub.engine) as conn:
            rows = await conn.execute(
                sa.select(task_events.c.to_status)
                .where(task_events.c.task_id == task_id)
                .order_by(task_events.c.id)
            )
            return [str(r.to_status) for r in rows]

    def request_key(self, prompt: str) -> str:
        """The request key of the last submit of ``prompt``'s task."""
        job = self.provider.jobs_for_prompt(prompt)
        assert job, f"no job for {prompt!r}"
        return job[-1].request_key


class JoiningBroker(MemoryBroker):
    """A memory broker that tells when every expected consumer group has a member.

    ``drain()`` only waits for groups with members: one whose runtime has not started yet
    would be skipped, and a test would read the database before its handler ran."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock=clock)
        self.expected: set[str] = set()
        self.all_joined = asyncio.Event()

    def consumer(
        self,
        group: str,
        topics: Sequence[str],
        *,
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
    ) -> MemoryConsumer:
        """A new member of ``group`` (see MemoryBroker.consumer); notes that it joined."""
        member = super().consumer(group, topics, on_assign=on_assign, on_revoke=on_revoke)
        self.expected.discard(group)
        if not self.expected:
            self.all_joined.set()
        return member


@contextlib.asynccontextmanager
async def fake_generation(
    db_url: str,
    tmp_path: Path,
    provider: FakeProvider | None = None,
    *,
    publish_twice: bool = False,
    **overrides: Any,
) -> AsyncIterator[FakeGeneration]:
    """A running hub (handlers only: no relay loop, no scanner loop) on ``db_url``;
    ``publish_twice`` delivers every event twice (a relay retrying after a lost ack)."""
    clock = ManualClock()
    broker = JoiningBroker(clock)
    config = HubConfig(
        engine=store_engine.create_engine(db_url),
        # DoublePublisher passes everything but publish through to the broker it wraps.
        broker=cast(Broker, DoublePublisher(broker)) if publish_twice else broker,
        clock=clock,
        blobs=LocalBlobStore(tmp_path / "blobs", secret=b"test-blob-secret"),
    )
    fake = provider or FakeProvider()
    probe = FakeProbe()
    settings = GenerationSettings(**(SETTINGS | overrides))
    pipeline = generation.with_state(
        lambda hub, _settings: build(hub, settings, [fake], probe=probe)
    )
    hub = Hub(config, [notifications, pipeline])
    await hub.start()
    await services.grant_credits(hub, tenant_id=TENANT, amount=10_000, grant_id="start")
    stop = asyncio.Event()
    broker.expected = {s.group for s in hub.handler_specs} | {s.group for s in hub.stream_specs}
    running = asyncio.create_task(hub.run(stop, relay=False))
    try:
        async with asyncio.timeout(20):
            await broker.all_joined.wait()
        yield FakeGeneration(hub, broker, clock, fake, probe)
    finally:
        stop.set()
        await asyncio.wait_for(running, 30)
        await hub.close()
