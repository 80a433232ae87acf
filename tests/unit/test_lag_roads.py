"""The lag monitor's two roads: a telemetry topic's breach is alerted but closes no gate; a
reliable topic's breach closes its pipeline's (seed 000 §9.3.4 asks for an alert on playback
lag, not for refusing work beside it)."""

from __future__ import annotations

from aigc_hub.core.clock import ManualClock
from aigc_hub.messaging.base import OutgoingMessage
from aigc_hub.messaging.catalog import DAY_MS, TopicCatalog, TopicSpec
from aigc_hub.messaging.memory import MemoryBroker
from aigc_hub.reliability.admission import AdmissionGate
from aigc_hub.reliability.lag import LagMonitor, Threshold

PLAYS = TopicSpec("plays", 2, DAY_MS, profile="telemetry", pipeline="shop")
ORDERS = TopicSpec("orders", 2, None, pipeline="shop")
LINE = Threshold(max_lag=2)


async def monitor_with_backlog(
    *topics: TopicSpec,
) -> tuple[LagMonitor, MemoryBroker]:
    """A monitor watching one stopped group per topic, each topic 3 records past a line of 2."""
    clock = ManualClock()
    broker = MemoryBroker(clock=clock)
    await broker.ensure_topics(list(topics))
    await broker.publish([OutgoingMessage(t.name, f"k{i}", b"x") for t in topics for i in range(3)])
    monitor = LagMonitor(
        broker,
        clock,
        {f"{t.name}-group": [t.name] for t in topics},
        TopicCatalog(topics),
        thresholds={t.name: LINE for t in topics},
    )
    return monitor, broker


async def test_a_telemetry_breach_is_alerted_but_only_the_reliable_one_is_overloaded() -> None:
    monitor, broker = await monitor_with_backlog(PLAYS, ORDERS)
    try:
        samples = await monitor.sample()

        assert {(s.topic, s.lag, s.breached) for s in samples} == {
            ("plays", 3, True),
            ("orders", 3, True),
        }
        assert set(monitor.overloaded) == {"plays-group/plays", "orders-group/orders"}
        assert {
            pipeline: [b.topic for b in breaches]
            for pipeline, breaches in monitor.overloaded_pipelines().items()
        } == {"shop": ["orders"]}
        assert not AdmissionGate(monitor).admit("shop").admitted
    finally:
        await broker.close()


async def test_a_telemetry_breach_alone_leaves_its_pipelines_gate_open() -> None:
    monitor, broker = await monitor_with_backlog(PLAYS)
    try:
        [sample] = await monitor.sample()

        assert sample.breached and "plays-group/plays" in monitor.overloaded
        assert monitor.overloaded_pipelines() == {}
        assert AdmissionGate(monitor).admit("shop").admitted
    finally:
        await broker.close()


async def test_a_pipelines_own_check_closes_its_gate_while_it_refuses() -> None:
    monitor, broker = await monitor_with_backlog(PLAYS)
    overloaded: list[tuple[int, str]] = [(900, "the analyzer answered 503")]
    gate = AdmissionGate(monitor)
    gate.add_check("shop", lambda: overloaded[0] if overloaded else None)
    try:
        await monitor.sample()
        refused = gate.admit("shop")
        other = gate.admit("elsewhere")
        overloaded.clear()
        reopened = gate.admit("shop")
    finally:
        await broker.close()
    # The wait is clamped to the gate's bounds; other pipelines are not held by it.
    assert (refused.admitted, refused.retry_after_s) == (False, 300)
    assert refused.reason == "the analyzer answered 503"
    assert other.admitted and reopened.admitted
