"""The notification feed: positions, the resume window, tenant/subject fan-out, slow subscribers."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from aigc_hub.bootstrap import Hub
from aigc_hub.core.envelope import Envelope
from aigc_hub.hub_config import HubConfig
from aigc_hub.messaging.base import OutgoingMessage
from aigc_hub.messaging.memory import MemoryBroker
from aigc_hub.reliability import notifications
from aigc_hub.reliability.notification_feed import (
    FeedItem,
    FeedSettings,
    Gap,
    NotificationFeed,
    Subscription,
)
from aigc_hub.reliability.notifications import Notification, notification_envelope
from aigc_hub.store import engine as store_engine


def note(tenant: str = "t1", subject: str = "s1", progress: float | None = None) -> Notification:
    kind = "progress" if progress is not None else "status"
    return Notification(
        tenant_id=tenant,
        subject_type="generation_task",
        subject_id=subject,
        kind=kind,
        status=None if progress is not None else "RUNNING",
        progress=progress,
        occurred_at_ms=1,
    )


async def drain(sub: Subscription) -> list[FeedItem | Gap]:
    out: list[FeedItem | Gap] = []
    while (item := await sub.next(0)) is not None:
        out.append(item)
    return out


def feed(**options: float) -> NotificationFeed:
    return NotificationFeed(MemoryBroker(), FeedSettings(**options))  # type: ignore[arg-type]


async def test_positions_order_what_the_feed_saw_and_name_the_feed() -> None:
    f = feed()
    first, second = f.add(note()), f.add(note())
    assert (first.seq, second.seq) == (1, 2)
    assert first.id == f"{f.feed_id}-1" and second.id == f"{f.feed_id}-2"
    assert feed().feed_id != f.feed_id  # another process (or a restart) has other positions


async def test_fan_out_by_tenant_and_subject() -> None:
    f = feed()
    all_of_t1 = f.subscribe("t1")
    only_s2 = f.subscribe("t1", ["s2"])
    of_t2 = f.subscribe("t2")
    f.add(note("t1", "s1"))
    f.add(note("t1", "s2"))
    f.add(note("t2", "s2"))
    assert [i.notification.subject_id for i in await drain(all_of_t1)] == ["s1", "s2"]  # type: ignore[union-attr]
    assert [i.notification.subject_id for i in await drain(only_s2)] == ["s2"]  # type: ignore[union-attr]
    assert [i.notification.tenant_id for i in await drain(of_t2)] == ["t2"]  # type: ignore[union-attr]


async def test_resume_replays_exactly_the_missed_matching_notifications() -> None:
    f = feed()
    items = [f.add(note("t1" if i % 2 == 0 else "t2", f"s{i}")) for i in range(6)]
    sub = f.subscribe("t1", last_event_id=items[1].id)
    got = await drain(sub)
    assert got == [items[2], items[4]]
    assert await drain(f.subscribe("t1", last_event_id=items[-1].id)) == []


@pytest.mark.parametrize("bad", ["nonsense", "abcd1234-1", "", "-"])
async def test_a_foreign_or_unknown_position_is_a_gap(bad: str) -> None:
    f = feed()
    f.add(note())
    assert await drain(f.subscribe("t1", last_event_id=bad)) == [Gap("unknown_id")]
    future = f"{f.feed_id}-99"  # never handed out
    got = await drain(f.subscribe("t1", last_event_id=future))
    assert got == [Gap("unknown_id")]
    assert isinstance(got[0], Gap) and got[0].id == f"{f.feed_id}-1"  # resume from here on


async def test_window_is_bounded_by_count_and_a_position_before_it_is_a_gap() -> None:
    f = feed(window_size=3)
    items = [f.add(note(subject=f"s{i}")) for i in range(5)]
    # items 3..5 are kept; resuming after item 2 misses nothing, after item 1 it would
    assert await drain(f.subscribe("t1", last_event_id=items[1].id)) == items[2:]
    assert await drain(f.subscribe("t1", last_event_id=items[0].id)) == [Gap("outside_window")]


async def test_window_is_bounded_by_age() -> None:
    f = feed(window_s=0.05)
    first = f.add(note())
    second = f.add(note())
    time.sleep(0.06)  # noqa: ASYNC251 - the window reads the monotonic clock
    assert await drain(f.subscribe("t1", last_event_id=first.id)) == [Gap("outside_window")]
    assert await drain(f.subscribe("t1", last_event_id=second.id)) == []  # nothing missed


async def test_a_slow_subscriber_is_cut_off_with_a_gap_and_others_are_served() -> None:
    f = feed(queue_size=3)
    slow, fast = f.subscribe("t1"), f.subscribe("t1")
    received: list[FeedItem | Gap] = []
    for i in range(10):
        f.add(note(subject=f"s{i}"))
        received += await drain(fast)
    assert all(isinstance(i, FeedItem) for i in received) and len(received) == 10
    got = await drain(slow)
    assert isinstance(got[0], Gap) and got[0].reason == "slow_subscriber"
    assert 1 <= len(got) <= 4 and slow.cut_offs >= 1
    first = got[1]
    assert isinstance(first, FeedItem) and got[0].id == f.position(first.seq - 1)
    f.add(note(subject="after"))
    assert [i.notification.subject_id for i in await drain(slow)] == ["after"]  # type: ignore[union-attr]


async def test_next_waits_and_close_wakes_it() -> None:
    f = feed()
    sub = f.subscribe("t1")
    assert await sub.next(0.01) is None
    waiting = asyncio.create_task(sub.next(10))
    await asyncio.sleep(0)
    sub.close()
    async with asyncio.timeout(1):
        assert await waiting is None
    assert f.subscribers == 0


async def test_feed_tails_the_broker_from_the_end() -> None:
    broker = MemoryBroker()
    await broker.ensure_topics([notifications.pipeline.topics[0]])

    async def publish(n: Notification) -> None:
        env = notification_envelope(n)
        await broker.publish([OutgoingMessage(notifications.TOPIC, env.key, env.to_bytes())])

    await publish(note(subject="before"))
    f = NotificationFeed(broker)
    await f.start()
    await f.start()  # idempotent
    sub = f.subscribe("t1")
    await broker.publish([OutgoingMessage(notifications.TOPIC, "x", b"not an envelope")])
    await publish(note(subject="after"))
    async with asyncio.timeout(5):
        item = await sub.next(5)
    assert isinstance(item, FeedItem) and item.notification.subject_id == "after"
    assert await sub.next(0.05) is None  # the history and the bad record were not served
    await f.close()
    assert not f.running and sub.closed


def test_notification_envelope_is_keyed_by_subject_and_carries_the_cause() -> None:
    cause = Envelope.new(
        "test.effect.requested", {}, key="k", source="worker", tenant_id="t1", trace_id="tr"
    )
    env = notification_envelope(note(subject="task-1", progress=0.5), cause=cause)
    assert (env.key, env.event_type, env.schema_version) == ("task-1", notifications.EVENT_TYPE, 1)
    assert (env.tenant_id, env.trace_id, env.causation_id) == ("t1", "tr", cause.event_id)
    assert env.correlation_id == "k" and env.source == "worker"
    assert Notification.model_validate(env.payload).progress == 0.5
    with pytest.raises(ValueError):
        notification_envelope(note(tenant="t2"), cause=cause)
    plain = notification_envelope(note())
    assert plain.source == notifications.SOURCE and plain.causation_id is None


def test_progress_is_a_fraction() -> None:
    with pytest.raises(ValueError):
        note(progress=1.5)


async def test_every_hub_knows_the_notification_schema_and_route(tmp_path: Path) -> None:
    engine = store_engine.create_engine(f"sqlite:///{tmp_path / 'h.db'}")
    hub = Hub(HubConfig(engine=engine, broker=MemoryBroker()))
    assert (notifications.EVENT_TYPE, notifications.VERSION) in hub.registry
    assert hub.routes.topic_for(notifications.EVENT_TYPE) == notifications.TOPIC
    assert [p.name for p in hub.pipelines] == ["notifications"]
    await hub.close()
