"""``GET /v1/events`` end to end: outbox → relay → broker → feed → SSE, on a real uvicorn.

Notifications are written through the outbox in a transaction, relayed to the broker
(embedded log, or Kafka via Tansu) and tailed by the API process's feed; clients read the
raw event stream, heartbeats included.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from aigc_hub import tenancy
from aigc_hub.bootstrap import Hub
from aigc_hub.interfaces.http.app import create_app
from aigc_hub.interfaces.http.limits import Limits
from aigc_hub.messaging.base import Broker
from aigc_hub.messaging.embedded import EmbeddedBroker
from aigc_hub.reliability.notification_feed import FeedItem, FeedSettings, Gap
from aigc_hub.reliability.notifications import Notification, notification_envelope
from tests.support.hubs import hub_for
from tests.support.served import serve
from tests.support.sse import FrameReader

HEARTBEAT_S = 0.2


@dataclass
class Served:
    """A hub with its relay running, served by uvicorn, and two tenants' keys."""

    hub: Hub
    url: str
    tenant_a: str
    key_a: str
    tenant_b: str
    key_b: str

    async def notify(self, tenant_id: str, subject_id: str, status: str = "RUNNING") -> None:
        """Write a notification through the outbox, in a transaction (the relay publishes it)."""
        note = Notification(
            tenant_id=tenant_id,
            subject_type="generation_task",
            subject_id=subject_id,
            kind="status",
            status=status,
            status_version=1,
            occurred_at_ms=int(time.time() * 1000),
        )
        async with self.hub.transaction() as conn:
            await self.hub.outbox.add(conn, [notification_envelope(note)])

    @contextlib.asynccontextmanager
    async def stream(
        self, key: str | None, *, headers: dict[str, str] | None = None, **params: object
    ) -> AsyncIterator[FrameReader]:
        """An open event stream, past its ``: ready`` comment (subscribed)."""
        sent = dict(headers or {})
        if key is not None:
            sent["Authorization"] = f"Bearer {key}"
        timeout = httpx.Timeout(10.0)
        async with (
            httpx.AsyncClient(base_url=self.url, timeout=timeout) as client,
            client.stream("GET", "/v1/events", headers=sent, params=params) as response,
        ):
            assert response.status_code == 200, await response.aread()
            assert response.headers["content-type"].startswith("text/event-stream")
            reader = FrameReader(response)
            try:
                first = await reader.next()
                assert first.comments == ["ready"] and first.retry is not None
                yield reader
            finally:
                await reader.aclose()


def _broker(kind: str, tmp_path: Path, request: pytest.FixtureRequest | None = None) -> Broker:
    if kind == "kafka":
        assert request is not None
        return request.getfixturevalue("kafka_endpoint").broker()  # type: ignore[no-any-return]
    return EmbeddedBroker(tmp_path / "log.db", poll_interval=0.01)


@contextlib.asynccontextmanager
async def running(
    db_url: str, broker: Broker, feed: FeedSettings | None = None, limits: Limits | None = None
) -> AsyncIterator[Served]:
    async with hub_for(db_url, broker, []) as hub:
        hub.notification_feed.settings = feed or FeedSettings(heartbeat_s=HEARTBEAT_S)
        tenant_a, key_a = await tenancy.create_tenant(hub.engine, "tenant-a")
        tenant_b, key_b = await tenancy.create_tenant(hub.engine, "tenant-b")
        stop = asyncio.Event()
        relay = asyncio.create_task(hub.run(stop))
        try:
            async with serve(create_app(hub, limits=limits)) as url:
                yield Served(hub, url, tenant_a.id, key_a, tenant_b.id, key_b)
        finally:
            stop.set()
            await relay


@pytest.fixture(params=["embedded", pytest.param("kafka", marks=pytest.mark.kafka)])
async def served(
    request: pytest.FixtureRequest, db_url: str, tmp_path: Path
) -> AsyncIterator[Served]:
    async with running(db_url, _broker(request.param, tmp_path, request)) as s:
        yield s


@pytest.fixture
async def embedded(db_url: str, tmp_path: Path) -> AsyncIterator[Served]:
    async with running(db_url, _broker("embedded", tmp_path)) as s:
        yield s


async def test_a_committed_notification_reaches_its_tenant_and_no_other(served: Served) -> None:
    async with served.stream(served.key_a) as a, served.stream(served.key_b) as b:
        await served.notify(served.tenant_a, "task-a1", "QUEUED")
        frame = await a.next_event(timeout=20)
        assert frame.event == "notification" and frame.id
        body = frame.json()
        assert (body["tenant_id"], body["subject_id"], body["status"]) == (
            served.tenant_a,
            "task-a1",
            "QUEUED",
        )
        await served.notify(served.tenant_b, "task-b1")
        frame_b = await b.next_event(timeout=20)
        assert frame_b.json()["subject_id"] == "task-b1"  # B's first event is its own
        assert await a.events_within(0.5) == []  # and A never sees B's


async def test_a_rolled_back_transaction_notifies_nobody(embedded: Served) -> None:
    s = embedded
    async with s.stream(s.key_a) as a:
        note = Notification(
            tenant_id=s.tenant_a,
            subject_type="generation_task",
            subject_id="ghost",
            kind="status",
            occurred_at_ms=1,
        )
        with pytest.raises(RuntimeError):
            async with s.hub.transaction() as conn:
                await s.hub.outbox.add(conn, [notification_envelope(note)])
                raise RuntimeError("the fact did not commit")
        await s.notify(s.tenant_a, "real")
        assert (await a.next_event(timeout=20)).json()["subject_id"] == "real"


async def test_heartbeats_arrive_while_idle(embedded: Served) -> None:
    async with embedded.stream(embedded.key_a) as a:
        beats = [await a.next(timeout=5) for _ in range(3)]
    assert all(f.comments == ["heartbeat"] and f.event is None for f in beats)


async def test_subject_filter(embedded: Served) -> None:
    s = embedded
    async with s.stream(s.key_a, subject_id=["t2", "t3"]) as a:
        for subject in ("t1", "t2", "t3"):
            await s.notify(s.tenant_a, subject)
        got = [(await a.next_event(timeout=20)).json()["subject_id"] for _ in range(2)]
        assert sorted(got) == ["t2", "t3"]  # t1 filtered out; t2/t3 may interleave
        assert await a.events_within(0.3) == []


async def test_resume_with_last_event_id_gets_exactly_the_missed_ones(embedded: Served) -> None:
    s = embedded
    watcher = s.hub.notification_feed.subscribe(s.tenant_a)  # tells us when the feed has them
    async with s.stream(s.key_a) as a:
        await s.notify(s.tenant_a, "n1")
        first = await a.next_event(timeout=20)
    for subject in ("n2", "n3"):
        await s.notify(s.tenant_a, subject)
    await s.notify(s.tenant_b, "other")
    seen = [await watcher.next(20) for _ in range(3)]
    # the feed's order: n1 first (published alone); n2 and n3 may interleave (two partitions)
    order = [i.notification.subject_id for i in seen if isinstance(i, FeedItem)]
    assert order[0] == "n1" and sorted(order) == ["n1", "n2", "n3"]
    assert first.id is not None
    async with s.stream(s.key_a, headers={"Last-Event-ID": first.id}) as again:
        resumed = [await again.next_event(timeout=5) for _ in range(2)]
        assert [f.json()["subject_id"] for f in resumed] == order[1:]
        assert await again.events_within(0.4) == []
    # the query parameter does the same for clients that cannot set headers
    async with s.stream(s.key_a, last_event_id=resumed[0].id) as by_query:
        assert (await by_query.next_event(timeout=5)).json()["subject_id"] == order[2]
    watcher.close()


async def test_an_id_outside_the_window_or_unknown_gets_reset(db_url: str, tmp_path: Path) -> None:
    feed = FeedSettings(heartbeat_s=HEARTBEAT_S, window_size=2)
    async with running(db_url, _broker("embedded", tmp_path), feed) as s:
        async with s.stream(s.key_a) as a:
            for i in range(4):
                await s.notify(s.tenant_a, f"w{i}")
            got = [await a.next_event(timeout=20) for _ in range(4)]
        # the feed's order (partitions interleave), not the publish order
        ids = [e.id for e in got]
        subjects = [e.json()["subject_id"] for e in got]
        assert all(ids) and sorted(subjects) == ["w0", "w1", "w2", "w3"]
        async with s.stream(s.key_a, headers={"Last-Event-ID": str(ids[0])}) as old:
            reset = await old.next_event(timeout=5)
            assert reset.event == "reset" and reset.json()["reason"] == "outside_window"
            assert "re-read" in reset.json()["detail"]
        async with s.stream(s.key_a, headers={"Last-Event-ID": "elsewhere-7"}) as foreign:
            reset = await foreign.next_event(timeout=5)
            assert reset.event == "reset" and reset.json()["reason"] == "unknown_id"
        async with s.stream(s.key_a, headers={"Last-Event-ID": str(ids[2])}) as recent:
            assert (await recent.next_event(timeout=5)).json()["subject_id"] == subjects[3]


async def test_a_slow_subscriber_gets_reset_and_the_feed_serves_the_others(
    db_url: str, tmp_path: Path
) -> None:
    feed = FeedSettings(heartbeat_s=HEARTBEAT_S, queue_size=3)
    async with running(db_url, _broker("embedded", tmp_path), feed) as s:
        slow = s.hub.notification_feed.subscribe(s.tenant_a)  # subscribed, never reading
        async with s.stream(s.key_a) as fast:
            for i in range(8):
                await s.notify(s.tenant_a, f"s{i}")
                assert (await fast.next_event(timeout=20)).json()["subject_id"] == f"s{i}"
        pending = []
        while (item := await slow.next(0)) is not None:
            pending.append(item)
        # cut off (pending dropped, a gap instead), then fed again: at most a queue's worth
        assert pending[0] == Gap("slow_subscriber") and slow.cut_offs >= 1
        assert len(pending) <= 3
        last = pending[-1]
        assert isinstance(last, FeedItem) and last.notification.subject_id == "s7"
        slow.close()


async def test_a_slow_http_client_gets_reset_and_keeps_streaming(
    db_url: str, tmp_path: Path
) -> None:
    feed = FeedSettings(heartbeat_s=HEARTBEAT_S, queue_size=2)
    async with (
        running(db_url, _broker("embedded", tmp_path), feed) as s,
        s.stream(s.key_a) as a,
    ):
        # one relay pass publishes all 20 at once: far more than the client's queue
        async with s.hub.transaction() as conn:
            notes = [
                Notification(
                    tenant_id=s.tenant_a,
                    subject_type="generation_task",
                    subject_id=f"burst{i}",
                    kind="progress",
                    progress=i / 20,
                    occurred_at_ms=1,
                )
                for i in range(20)
            ]
            await s.hub.outbox.add(conn, [notification_envelope(n) for n in notes])
        frames = await a.events_within(3)
        kinds = [f.event for f in frames]
        assert "reset" in kinds
        # fewer than sent (some were dropped for the reset), and the stream goes on
        assert kinds[-1] == "notification" and len(frames) < 21
        await s.notify(s.tenant_a, "after")
        assert (await a.next_event(timeout=20)).json()["subject_id"] == "after"


async def test_max_seconds_ends_the_stream(embedded: Served) -> None:
    async with embedded.stream(embedded.key_a, max_seconds=0.5) as a:
        started = time.monotonic()
        with pytest.raises(EOFError):
            while True:
                await a.next(timeout=5)
        assert time.monotonic() - started < 3


async def test_unauthenticated_and_admin_keys_get_problems(embedded: Served) -> None:
    admin = await tenancy.create_admin_key(embedded.hub.engine)
    async with httpx.AsyncClient(base_url=embedded.url) as client:
        anonymous = await client.get("/v1/events")
        assert anonymous.status_code == 401
        assert anonymous.headers["content-type"] == "application/problem+json"
        assert anonymous.headers["www-authenticate"] == "Bearer"
        assert anonymous.json()["type"].endswith("/unauthorized")
        wrong = await client.get("/v1/events", headers={"Authorization": "Bearer ak_nope"})
        assert wrong.status_code == 401
        as_admin = await client.get("/v1/events", headers={"Authorization": f"Bearer {admin}"})
        assert as_admin.status_code == 403
