"""A pipeline's stream group inside the hub: run by ``Hub.run(groups=...)`` like a handler
group, watched by the lag monitor (the gauge ``/metrics`` exports, the alert's breach), and
refused when its name is taken by another group."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from aigc_hub.bootstrap import Hub
from aigc_hub.core.errors import ConfigurationError
from aigc_hub.hub_config import HubConfig
from aigc_hub.messaging.base import Broker
from aigc_hub.pipeline import PipelineBase
from aigc_hub.reliability.lag import Threshold
from aigc_hub.store import engine as store_engine
from tests.support import effects as fx
from tests.support.hubs import make_broker, wait_until
from tests.support.streams import PARTITIONS, Recorder, fresh, publish, stream_pipeline

TIMEOUT_S = 30.0
#: The test's stand-in for the seed's 50,000 on ``topic.playback.event``.
MAX_LAG = 20


@pytest.fixture(params=["embedded", pytest.param("kafka", marks=pytest.mark.kafka)])
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Broker:
    """The embedded log, or a Kafka broker on the session's Tansu."""
    if request.param == "kafka":
        kafka: Broker = request.getfixturevalue("kafka_endpoint").broker()
        return kafka
    return make_broker("embedded", tmp_path)


@contextlib.asynccontextmanager
async def watched_hub(
    sqlite_url: str, broker: Broker, pipelines: list[PipelineBase], topic: str
) -> AsyncIterator[Hub]:
    """A started hub whose lag monitor samples every 0.1 s, ``topic`` breached past MAX_LAG."""
    config = HubConfig(
        engine=store_engine.create_engine(sqlite_url),
        broker=broker,
        lag_interval_s=0.1,
        lag_thresholds={topic: Threshold(max_lag=MAX_LAG)},
    )
    hub = Hub(config, pipelines)
    await hub.start()
    try:
        yield hub
    finally:
        await hub.close()


def exported_lag(group: str, topic: str) -> float | None:
    """The group's lag on ``topic`` summed over partitions, as the gauge exports it (None
    before the lag monitor sampled it)."""
    values = [
        REGISTRY.get_sample_value(
            "aigc_hub_consumer_lag_records", {"group": group, "topic": topic, "partition": str(p)}
        )
        for p in range(PARTITIONS)
    ]
    return None if None in values else sum(v or 0.0 for v in values)


async def test_a_stream_group_runs_under_hub_run_and_the_lag_monitor_reports_its_lag(
    sqlite_url: str, broker: Broker
) -> None:
    topic, group = fresh("t.play"), fresh("g.sink")
    handler = Recorder()
    async with watched_hub(
        sqlite_url, broker, [stream_pipeline(topic, group, handler)], topic
    ) as hub:
        assert hub.lag.groups[group] == [topic]
        await publish(broker, topic, 50)

        # the group not running: its lag is exported and past the threshold
        stop = asyncio.Event()
        monitor_only = asyncio.create_task(hub.run(stop, groups=[], relay=False, lag=True))

        async def lag_exported() -> bool:
            return exported_lag(group, topic) == 50

        await wait_until(lag_exported, timeout=TIMEOUT_S)
        assert f"{group}/{topic}" in hub.lag.overloaded
        assert handler.calls == []
        stop.set()
        await asyncio.wait_for(monitor_only, TIMEOUT_S)

        # selected by name, it runs beside the lag monitor and drains its lag
        stop = asyncio.Event()
        with_group = asyncio.create_task(hub.run(stop, groups=[group], relay=False, lag=True))

        async def drained() -> bool:
            return exported_lag(group, topic) == 0 and len(handler.handled()) == 50

        await wait_until(drained, timeout=TIMEOUT_S)
        assert f"{group}/{topic}" not in hub.lag.overloaded
        stop.set()
        await asyncio.wait_for(with_group, TIMEOUT_S)
        assert len(set(handler.handled())) == 50


async def test_hub_run_without_a_selection_runs_stream_groups_too(
    sqlite_url: str, tmp_path: Path
) -> None:
    topic, group = fresh("t.play"), fresh("g.detector")
    handler = Recorder()
    broker = make_broker("embedded", tmp_path)
    async with watched_hub(
        sqlite_url, broker, [stream_pipeline(topic, group, handler)], topic
    ) as hub:
        await publish(broker, topic, 5)
        stop = asyncio.Event()
        everything = asyncio.create_task(hub.run(stop))

        async def handled() -> bool:
            return len(handler.handled()) == 5

        await wait_until(handled, timeout=TIMEOUT_S)
        stop.set()
        await asyncio.wait_for(everything, TIMEOUT_S)


def test_a_stream_group_named_like_a_handler_group_is_refused(sqlite_url: str) -> None:
    clash = stream_pipeline(fresh("t.play"), fx.GROUP, Recorder())
    config = HubConfig(
        engine=store_engine.create_engine(sqlite_url), broker=make_broker("memory", Path())
    )
    with pytest.raises(ConfigurationError, match=f"stream group '{fx.GROUP}'"):
        Hub(config, [fx.make_pipeline(), clash])


def test_a_stream_group_declared_twice_is_refused(sqlite_url: str) -> None:
    first = stream_pipeline(fresh("t.play"), "g.twice", Recorder())
    first.stream("g.twice", [first.topics[0].name])(Recorder())
    config = HubConfig(
        engine=store_engine.create_engine(sqlite_url), broker=make_broker("memory", Path())
    )
    with pytest.raises(ConfigurationError, match="declared more than once"):
        Hub(config, [first])
