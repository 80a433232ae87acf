"""The client's ``events()`` and ``wait_for()`` against a real server (SQLite, embedded log):
a rate-limited stream opened again after ``Retry-After``, and ``wait_for``'s polling fallback
when the stream is unavailable."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from aigc_hub.client import (
    AsyncHubClient,
    Event,
    HubClient,
    RateLimited,
    RetryPolicy,
    WaitTimeout,
)
from aigc_hub.interfaces.http.limits import Limits
from aigc_hub.messaging.embedded import EmbeddedBroker
from aigc_hub.reliability.notification_feed import FeedSettings
from tests.integration.test_events_sse import Served, running
from tests.support.hubs import wait_until
from tests.support.served import free_port


@pytest.fixture
async def served(sqlite_url: str, tmp_path: Path) -> AsyncIterator[Served]:
    broker = EmbeddedBroker(tmp_path / "log.db", poll_interval=0.01)
    async with running(sqlite_url, broker, FeedSettings(heartbeat_s=0.2)) as s:
        yield s


async def subscribers(served: Served, count: int) -> None:
    """Wait until the server's feed has exactly ``count`` open streams (they are subscribed)."""

    async def reached() -> bool:
        return served.hub.notification_feed.subscribers == count

    await wait_until(reached, timeout=20)


class Task:
    """A stand-in for a pipeline's task snapshot, changed by a 'worker' that notifies."""

    def __init__(self, served: Served, subject: str) -> None:
        self.served = served
        self.subject = subject
        self.state: dict[str, Any] = {"id": subject, "status": "QUEUED"}
        self.reads = 0
        self.lock = threading.Lock()

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            self.reads += 1
            return dict(self.state)

    async def finish_once_subscribed(self) -> None:
        """Finish (and notify) once a stream is subscribed, so the notification is what wakes it."""
        await subscribers(self.served, 1)
        with self.lock:
            self.state["status"] = "SUCCEEDED"
        await self.served.notify(self.served.tenant_a, self.subject, "SUCCEEDED")


def done(snapshot: dict[str, Any]) -> bool:
    return snapshot["status"] == "SUCCEEDED"


async def test_async_events_yield_notifications_and_resets(served: Served) -> None:
    async with AsyncHubClient(served.url, api_key=served.key_a) as hub:
        stream = hub.events(subject_id="task-1")
        first = asyncio.create_task(anext(stream))
        await subscribers(served, 1)
        await served.notify(served.tenant_a, "other")
        await served.notify(served.tenant_a, "task-1", "RUNNING")
        async with asyncio.timeout(20):
            event = await first
        assert event.kind == "notification" and event.notification is not None
        assert (event.notification.subject_id, event.notification.status) == ("task-1", "RUNNING")
        await stream.aclose()

        resumed = hub.events(last_event_id="elsewhere-3")
        async with asyncio.timeout(10):
            reset = await anext(resumed)
        assert reset.kind == "reset" and reset.reason == "unknown_id" and reset.id
        await resumed.aclose()


async def test_sync_events_yield_the_subjects_notifications_in_order(served: Served) -> None:
    got: list[Event] = []

    def read() -> None:
        with HubClient(served.url, api_key=served.key_a) as hub:
            for event in hub.events(subject_id="task-s"):
                got.append(event)
                if len(got) == 2:
                    return

    reader = asyncio.create_task(asyncio.to_thread(read))
    await subscribers(served, 1)
    await served.notify(served.tenant_a, "task-s", "RUNNING")
    await served.notify(served.tenant_a, "task-s", "SUCCEEDED")
    async with asyncio.timeout(20):
        await reader
    assert [e.notification.status for e in got if e.notification] == ["RUNNING", "SUCCEEDED"]


async def test_async_wait_for_wakes_on_the_notification(served: Served) -> None:
    task = Task(served, "task-w")

    async def snapshot() -> dict[str, Any]:
        return task.snapshot()

    worker = asyncio.create_task(task.finish_once_subscribed())
    async with AsyncHubClient(served.url, api_key=served.key_a) as hub:
        result = await hub.wait_for("task-w", snapshot, done, timeout=20, poll_interval=60)
    await worker
    assert result["status"] == "SUCCEEDED"
    assert task.reads <= 4  # first read, subscribed, the notification: no polling


async def test_sync_wait_for_over_sse_and_its_timeout(served: Served) -> None:
    task = Task(served, "task-x")

    def wait(timeout: float) -> dict[str, Any]:
        with HubClient(served.url, api_key=served.key_a) as hub:
            return hub.wait_for("task-x", task.snapshot, done, timeout=timeout, poll_interval=60)

    with pytest.raises(WaitTimeout) as caught:
        await asyncio.to_thread(wait, 0.5)
    assert caught.value.snapshot["status"] == "QUEUED"
    await subscribers(served, 0)  # the timed-out wait's stream is gone
    worker = asyncio.create_task(task.finish_once_subscribed())
    result = await asyncio.to_thread(wait, 20)
    await worker
    assert result["status"] == "SUCCEEDED"


async def test_wait_for_reads_the_snapshot_only_for_notifications_worth_it(
    served: Served,
) -> None:
    task = Task(served, "task-p")

    async def snapshot() -> dict[str, Any]:
        return task.snapshot()

    async def work() -> None:
        await subscribers(served, 1)
        for _ in range(5):
            await served.notify(served.tenant_a, "task-p", "RUNNING")
        await task.finish_once_subscribed()

    worker = asyncio.create_task(work())
    async with AsyncHubClient(served.url, api_key=served.key_a) as hub:
        result = await hub.wait_for(
            "task-p",
            snapshot,
            done,
            timeout=20,
            poll_interval=60,
            worth_reading=lambda note: note.status == "SUCCEEDED",
        )
    await worker
    assert result["status"] == "SUCCEEDED"
    assert task.reads == 3  # first read, subscribed, the terminal notification: no progress


def _refusing_events(request: httpx.Request) -> httpx.Response:
    assert request.url.path == "/v1/events"
    return httpx.Response(
        404,
        headers={"Content-Type": "application/problem+json"},
        json={"type": "about:blank", "title": "Not Found", "status": 404, "detail": "no"},
    )


@pytest.mark.parametrize("how", ["404", "connect-error"])
def test_wait_for_falls_back_to_polling(how: str) -> None:
    calls = {"n": 0}

    def snapshot() -> dict[str, Any]:
        calls["n"] += 1
        return {"status": "SUCCEEDED" if calls["n"] >= 4 else "RUNNING"}

    if how == "404":
        client = HubClient("http://hub.test", transport=httpx.MockTransport(_refusing_events))
    else:  # nothing listens there
        url = f"http://127.0.0.1:{free_port()}"
        client = HubClient(url, retry=RetryPolicy(attempts=1))
    with client:
        result = client.wait_for("t", snapshot, done, timeout=10, poll_interval=0.01)
    assert result["status"] == "SUCCEEDED" and calls["n"] == 4


async def test_async_wait_for_falls_back_to_polling() -> None:
    calls = {"n": 0}

    async def snapshot() -> dict[str, Any]:
        calls["n"] += 1
        return {"status": "SUCCEEDED" if calls["n"] >= 3 else "RUNNING"}

    transport = httpx.MockTransport(_refusing_events)
    async with AsyncHubClient("http://hub.test", transport=transport) as hub:
        result = await hub.wait_for("t", snapshot, done, timeout=10, poll_interval=0.01)
        assert result["status"] == "SUCCEEDED"
        calls["n"] = -1000  # not done for a long while
        with pytest.raises(WaitTimeout):
            await hub.wait_for("t", snapshot, done, timeout=0.05, poll_interval=0.01)


class Recording(httpx.AsyncHTTPTransport):
    """The network, noting the status of every answer by path."""

    def __init__(self) -> None:
        super().__init__()
        self.answers: list[tuple[str, int]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        self.answers.append((request.url.path, response.status_code))
        return response


async def test_a_rate_limited_stream_is_opened_again_after_retry_after(
    sqlite_url: str, tmp_path: Path
) -> None:
    broker = EmbeddedBroker(tmp_path / "log.db", poll_interval=0.01)
    limits = Limits(rate_per_s=2.0, burst=1.0)
    async with running(sqlite_url, broker, FeedSettings(heartbeat_s=0.2), limits) as served:
        task = Task(served, "task-r")

        async def snapshot() -> dict[str, Any]:
            return task.snapshot()

        network = Recording()
        async with AsyncHubClient(served.url, api_key=served.key_a, transport=network) as hub:
            async with contextlib.aclosing(hub.events()) as stream:
                first = asyncio.create_task(anext(stream))
                await subscribers(served, 1)  # connected: the tenant's one token is spent
                await served.notify(served.tenant_a, "other")
                async with asyncio.timeout(20):
                    await first
            await subscribers(served, 0)
            worker = asyncio.create_task(task.finish_once_subscribed())  # after the 429
            result = await hub.wait_for("task-r", snapshot, done, timeout=20, poll_interval=60)
        await worker
    assert result["status"] == "SUCCEEDED"
    streams = [status for path, status in network.answers if path == "/v1/events"]
    assert streams[:3] == [200, 429, 200]  # refused once, then listened (no polling)
    assert task.reads <= 4


def test_polling_waits_on_when_told_to_slow_down() -> None:
    calls = {"n": 0}

    def snapshot() -> dict[str, Any]:
        calls["n"] += 1
        if calls["n"] in (2, 3):
            raise RateLimited(429, title="Too Many Requests", retry_after=0.01)
        return {"status": "SUCCEEDED" if calls["n"] >= 5 else "RUNNING"}

    transport = httpx.MockTransport(_refusing_events)
    with HubClient("http://hub.test", transport=transport) as client:
        result = client.wait_for("t", snapshot, done, timeout=10, poll_interval=0.01)
    assert result["status"] == "SUCCEEDED" and calls["n"] == 5
