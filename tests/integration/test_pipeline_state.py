"""A pipeline's typed state: built once by the hub at start, bound into its handlers and
scanners, readable through its key, replaceable before start, closed with the hub."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from aigc_hub.bootstrap import Hub
from aigc_hub.core.envelope import Envelope
from aigc_hub.hub_config import HubConfig
from aigc_hub.messaging.base import Record
from aigc_hub.messaging.catalog import TopicSpec
from aigc_hub.messaging.memory import MemoryBroker
from aigc_hub.pipeline import Pipeline
from aigc_hub.reliability.scanners import Finding
from aigc_hub.runtime.context import HandlerContext
from aigc_hub.settings import Settings
from aigc_hub.store import engine as store_engine
from tests.support import effects as fx
from tests.support.hubs import hub_for, wait_until


@dataclass
class Counter:
    """The test pipeline's state: what its handler saw, and whether the hub closed it."""

    hub: Hub
    label: str
    seen: list[int] = field(default_factory=list)
    closed: bool = False

    async def close(self) -> None:
        self.closed = True


@dataclass
class CounterScanner:
    """A scanner built from the state (it finds nothing)."""

    state: Counter
    name: str = "counter-scanner"
    interval_s: float = 60.0

    async def find(self, now_ms: int) -> Sequence[Finding]:
        return []

    async def repair(self, finding: Finding, now_ms: int) -> str:
        return "skipped"


def counting_pipeline(builds: list[Counter]) -> Pipeline[Counter]:
    """A pipeline whose state factory records every state it builds in ``builds``."""

    def build_state(hub: Hub, settings: Settings) -> Counter:
        built = Counter(hub, "factory")
        builds.append(built)
        return built

    p = Pipeline("counting", state=build_state)
    p.topic(TopicSpec(fx.TOPIC, 2, 86_400_000, pipeline="counting"))
    p.event(fx.EVENT, 1, topic=fx.TOPIC)(fx.EffectRequested)

    @p.handler_with_state(fx.GROUP, [fx.TOPIC])
    async def count(state: Counter, env: Envelope, ctx: HandlerContext) -> list[Envelope]:
        state.seen.append(ctx.payload_as(fx.EffectRequested).n)
        ctx.insert(fx.effects, event_id=env.event_id, key=env.key, n=state.seen[-1])
        return []

    p.scanner_with_state(CounterScanner)
    return p


async def test_the_hub_builds_the_state_once_binds_it_into_handlers_and_closes_it(
    sqlite_url: str,
) -> None:
    builds: list[Counter] = []
    pipeline = counting_pipeline(builds)
    async with hub_for(sqlite_url, MemoryBroker(), [pipeline]) as hub:
        assert len(builds) == 1
        state = hub.state_of(pipeline.key)
        assert state is builds[0] and state.hub is hub
        await hub.start()  # a second start builds nothing new
        assert len(builds) == 1 and hub.state_of(pipeline.key) is state

        async with hub.transaction() as conn:
            await hub.outbox.add(conn, [fx.request(f"k{n}", n) for n in range(3)])
        stop = asyncio.Event()
        running = asyncio.create_task(hub.run(stop))

        async def all_handled() -> bool:
            return len(await fx.effect_rows(hub.engine)) == 3

        await wait_until(all_handled, timeout=30)
        stop.set()
        await running
        assert sorted(state.seen) == [0, 1, 2]
        scanners = [s for s in hub.scanners() if isinstance(s, CounterScanner)]
        assert [s.state for s in scanners] == [state]
        assert not state.closed
    assert state.closed


async def test_before_start_a_state_handler_refuses_to_run_and_the_state_is_unknown(
    tmp_path: Path,
) -> None:
    pipeline = counting_pipeline([])
    engine = store_engine.create_engine(f"sqlite:///{tmp_path / 'h.db'}")
    hub = Hub(HubConfig(engine=engine, broker=MemoryBroker()), [pipeline])
    try:
        with pytest.raises(RuntimeError, match=r"Hub\.start"):
            hub.state_of(pipeline.key)
        (spec,) = [s for s in hub.handler_specs if s.group == fx.GROUP]
        with pytest.raises(RuntimeError, match="needs pipeline 'counting'"):
            await spec.handler(fx.request("k", 1), _context_for_nothing(hub))
    finally:
        await hub.close()


async def test_use_state_replaces_the_factory_before_start_and_is_refused_after(
    tmp_path: Path,
) -> None:
    builds: list[Counter] = []
    pipeline = counting_pipeline(builds)
    engine = store_engine.create_engine(f"sqlite:///{tmp_path / 'h.db'}")
    hub = Hub(HubConfig(engine=engine, broker=MemoryBroker()), [pipeline])
    hub.use_state(pipeline, lambda built_for, _settings: Counter(built_for, "given"))
    try:
        await hub.start()
        assert hub.state_of(pipeline.key).label == "given"
        assert builds == []  # the pipeline's own factory never ran
        with pytest.raises(RuntimeError, match="already has its state"):
            hub.use_state(pipeline, lambda built_for, _settings: Counter(built_for, "late"))
    finally:
        await hub.close()


async def test_with_state_gives_a_pipeline_a_prebuilt_state_without_changing_the_original(
    sqlite_url: str,
) -> None:
    builds: list[Counter] = []
    pipeline = counting_pipeline(builds)
    given = pipeline.with_state(lambda built_for, _settings: Counter(built_for, "given"))
    async with hub_for(sqlite_url, MemoryBroker(), [given]) as hub:
        assert hub.state_of(pipeline.key).label == "given"
    assert pipeline.state is not None and given.state is not pipeline.state
    assert builds == []


async def test_hub_from_settings_takes_its_policies_and_limits_from_the_settings(
    tmp_path: Path,
) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'h.db'}",
        broker="memory",
        data_dir=tmp_path,
        pipelines="",
        concurrency=7,
        relay_batch=33,
        commit_wait_ms=5.0,
        scanner_lease_ttl_ms=4_000,
    )
    hub = Hub.from_settings(settings)
    try:
        assert hub.config.settings is settings
        assert hub.concurrency == 7
        assert hub.relay.batch_size == 33
        assert hub.config.commit_wait == pytest.approx(0.005)
        assert hub.scanner_lease_ttl_ms == 4_000
        assert [p.name for p in hub.pipelines] == ["notifications"]
    finally:
        await hub.close()


def _context_for_nothing(hub: Hub) -> HandlerContext:
    """A context for a handler that must refuse before reading it."""
    return HandlerContext(
        consumer="test",
        pipeline="counting",
        record=Record(fx.TOPIC, 0, 0, "k", b"", {}, 0),
        engine=hub.engine,
        clock=hub.clock,
    )
