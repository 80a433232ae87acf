"""Build hubs for tests: one database URL, one broker engine, controllable clock and failpoints."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path

from aigc_hub.blobs.base import BlobStore
from aigc_hub.bootstrap import Hub
from aigc_hub.core.clock import Clock, ManualClock
from aigc_hub.core.failpoints import Failpoints
from aigc_hub.core.retry import RetryPolicy
from aigc_hub.hub_config import HubConfig
from aigc_hub.messaging.base import Broker, OutgoingMessage
from aigc_hub.pipeline import PipelineBase
from aigc_hub.store import engine as store_engine
from tests.support import effects as fx

#: Deterministic policies (no jitter) with the seeds' numbers.
IN_PROCESS = RetryPolicy(base=1.0, factor=2.0, cap=8.0, max_retries=3, jitter=0.0)
DELAYED = RetryPolicy(base=60.0, factor=2.0, cap=8 * 3600.0, max_retries=7, jitter=0.0)


def make_broker(kind: str, tmp_path: Path, clock: Clock | None = None) -> Broker:
    """A broker engine for tests by name (record timestamps from ``clock`` when given)."""
    if kind == "memory":
        from aigc_hub.messaging.memory import MemoryBroker

        return MemoryBroker(clock=clock)
    if kind == "embedded":
        from aigc_hub.messaging.embedded import EmbeddedBroker

        return EmbeddedBroker(tmp_path / "log.db", clock=clock)
    raise ValueError(kind)


class DoublePublisher:
    """A broker wrapper publishing every batch twice, as a relay retry after a lost ack would."""

    def __init__(self, inner: Broker) -> None:
        self.inner = inner
        self.features = inner.features

    async def publish(self, messages: Sequence[OutgoingMessage]) -> None:
        """Publish ``messages``, then publish them again."""
        await self.inner.publish(messages)
        await self.inner.publish(messages)

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


@contextlib.asynccontextmanager
async def hub_for(
    db_url: str,
    broker: Broker,
    pipelines: Sequence[PipelineBase],
    *,
    clock: Clock | None = None,
    failpoints: Failpoints | None = None,
    concurrency: int | None = None,
    blobs: BlobStore | None = None,
) -> AsyncIterator[Hub]:
    """A started hub on ``db_url`` + ``broker`` with the test pipeline's tables created."""
    engine = store_engine.create_engine(db_url)
    await fx.create_tables(engine)
    config = HubConfig(
        engine=engine,
        broker=broker,
        clock=clock,
        failpoints=failpoints or Failpoints(),
        in_process=IN_PROCESS,
        delayed=DELAYED,
        concurrency=concurrency,
        blobs=blobs,
    )
    hub = Hub(config, pipelines)
    await hub.start()
    try:
        yield hub
    finally:
        await hub.close()


async def wait_until(
    predicate: Callable[[], Awaitable[bool]],
    *,
    timeout: float = 60.0,
    clock: ManualClock | None = None,
    step_s: float = 1.0,
) -> None:
    """Poll ``predicate`` until true; with a ManualClock, advance it ``step_s`` per poll."""
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached in time")
        if clock is not None:
            await clock.advance(step_s)
        await asyncio.sleep(0.01)
