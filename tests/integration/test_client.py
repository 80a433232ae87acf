"""The Python client against the real app on SQLite: round trips, problems, safe retries."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from fastapi import FastAPI

from aigc_hub import tenancy
from aigc_hub.bootstrap import Hub
from aigc_hub.client import (
    NO_RETRY,
    AsyncHubClient,
    Conflict,
    HubClient,
    NotFound,
    RetryPolicy,
    Unauthorized,
    Unavailable,
)
from aigc_hub.interfaces.http import problems
from aigc_hub.interfaces.http.app import create_app
from aigc_hub.messaging.memory import MemoryBroker
from aigc_hub.reliability.replay_jobs import ReplayJobs
from aigc_hub.store import tables
from tests.integration.test_admin_api import OTHER_TOPIC, seed
from tests.support import effects as fx
from tests.support.hubs import hub_for

pytestmark = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)

BASE_URL = "http://hub.test"
FAST = RetryPolicy(attempts=3, backoff_s=0.0)


@pytest.fixture
async def hub(db_url: str) -> AsyncIterator[Hub]:
    async with hub_for(db_url, MemoryBroker(), [fx.make_pipeline()]) as started:
        yield started


@pytest.fixture
async def app(hub: Hub) -> AsyncIterator[FastAPI]:
    app = create_app(hub)
    app.state.replay_jobs = ReplayJobs(hub.engine, hub.dlq, hub.clock, rate_per_s=200)
    yield app
    await app.state.replay_jobs.close()


@pytest.fixture
def asgi(app: FastAPI) -> httpx.ASGITransport:
    return httpx.ASGITransport(app=app, raise_app_exceptions=False)


@pytest.fixture
async def admin_key(hub: Hub) -> str:
    return await tenancy.create_admin_key(hub.engine)


class FlakyTransport(httpx.AsyncBaseTransport):
    """Answers the first ``fail`` requests to ``path`` with 503 (Retry-After: 0), then passes."""

    def __init__(self, inner: httpx.AsyncBaseTransport, path: str, fail: int = 1) -> None:
        self.inner = inner
        self.path = path
        self.fail = fail
        self.seen: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == self.path:
            self.seen.append(request)
            if self.fail > 0:
                self.fail -= 1
                await request.aread()  # as if it reached the server
                return httpx.Response(
                    503,
                    headers={"Retry-After": "0", "Content-Type": problems.MEDIA_TYPE},
                    json={
                        "type": problems.type_uri("unavailable"),
                        "title": "Service Unavailable",
                        "status": 503,
                        "detail": "try again",
                        "instance": self.path,
                    },
                )
        return await self.inner.handle_async_request(request)


class LoopBridge(httpx.BaseTransport):
    """A sync transport sending through an async one on ``loop`` (the sync client's thread
    must not be the loop's)."""

    def __init__(self, inner: httpx.AsyncBaseTransport, loop: asyncio.AbstractEventLoop) -> None:
        self.inner = inner
        self.loop = loop

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = request.read()

        async def send() -> httpx.Response:
            copy = httpx.Request(request.method, request.url, headers=request.headers, content=body)
            answer = await self.inner.handle_async_request(copy)
            content = await answer.aread()
            return httpx.Response(answer.status_code, headers=answer.headers, content=content)

        return asyncio.run_coroutine_threadsafe(send(), self.loop).result(timeout=30)


async def test_async_round_trips(hub: Hub, asgi: httpx.ASGITransport, admin_key: str) -> None:
    ids = await seed(hub)
    async with AsyncHubClient(BASE_URL, admin_key, transport=asgi, retry=FAST) as client:
        assert (await client.healthz()).status == "ok"
        page = await client.dlq_list(limit=2)
        assert [x.id for x in page.items] == ids[::-1][:2] and page.next_cursor
        assert [x.id async for x in client.dlq_iter(page_size=2)] == ids[::-1]
        assert [x.id for x in (await client.dlq_list(topic=OTHER_TOPIC)).items] == [ids[3]]

        one = await client.dlq_get(ids[0])
        assert one.envelope is not None and one.envelope["event_type"] == fx.EVENT
        assert one.history == [{"attempt": 1, "error": "boom"}]

        replayed = await client.dlq_replay(ids[0])
        assert replayed.id == ids[0] and replayed.status == "replayed"
        with pytest.raises(Conflict) as conflict:
            await client.dlq_replay(ids[0])
        assert conflict.value.type == problems.type_uri("conflict")

        dismissed = await client.dlq_dismiss([ids[3], 999_999], reason="noise")
        assert dismissed.dismissed == 1

        accepted = await client.dlq_replay_bulk(topic=fx.TOPIC, max=10)
        assert accepted.total == 3  # b, c and the raw one
        assert accepted.location == f"/admin/jobs/{accepted.job_id}"
        job = await client.wait_job(accepted.job_id, timeout=10, interval=0.02)
        assert (job.status, job.done, job.failed) == ("done", 2, 1)

        assert (await client.outbox()).backlog >= 3
        assert (await client.lag()).broker_reachable is True
        audit = await client.audit(limit=50, action="dlq.dismiss")
        assert [e.target for e in audit.items][:1] == ["999999"]
        assert audit.items[0].actor.startswith("admin:")

        with pytest.raises(NotFound) as missing:
            await client.dlq_get(999_999)
        assert missing.value.status == 404
        assert missing.value.type == problems.type_uri("not-found")
        assert missing.value.instance == "/admin/dlq/999999"
        with pytest.raises(NotFound):
            await client.job("nope")

    async with AsyncHubClient(BASE_URL, "wrong", transport=asgi, retry=FAST) as stranger:
        with pytest.raises(Unauthorized) as denied:
            await stranger.lag()
        assert denied.value.type == problems.type_uri("unauthorized")


async def test_bulk_retried_after_503_reuses_its_key(
    hub: Hub, app: FastAPI, asgi: httpx.ASGITransport, admin_key: str
) -> None:
    await seed(hub)
    flaky = FlakyTransport(asgi, "/admin/dlq/replay")
    async with AsyncHubClient(BASE_URL, admin_key, transport=flaky, retry=FAST) as client:
        accepted = await client.dlq_replay_bulk(topic=fx.TOPIC)
        await client.wait_job(accepted.job_id, timeout=10, interval=0.02)
    keys = [r.headers["Idempotency-Key"] for r in flaky.seen]
    assert len(keys) == 2 and keys[0] == keys[1] and keys[0]
    jobs = await _job_ids(app)
    assert jobs == [accepted.job_id]  # exactly one job


async def _job_ids(app: FastAPI) -> list[str]:
    hub: Hub = app.state.hub
    t = tables.admin_jobs
    async with hub.engine.connect() as conn:
        return [str(r[0]) for r in (await conn.execute(sa.select(t.c.id))).all()]


async def test_non_idempotent_post_is_not_retried(
    hub: Hub, asgi: httpx.ASGITransport, admin_key: str
) -> None:
    ids = await seed(hub)
    for path, action in [
        (f"/admin/dlq/{ids[0]}/replay", "replay"),
        ("/admin/dlq/dismiss", "dismiss"),
    ]:
        flaky = FlakyTransport(asgi, path)
        async with AsyncHubClient(BASE_URL, admin_key, transport=flaky, retry=FAST) as client:
            with pytest.raises(Unavailable) as failed:
                if action == "replay":
                    await client.dlq_replay(ids[0])
                else:
                    await client.dlq_dismiss([ids[0]])
            assert failed.value.retry_after == 0
            assert len(flaky.seen) == 1
            assert "Idempotency-Key" not in flaky.seen[0].headers
            assert (await client.dlq_get(ids[0])).status == "pending"


async def test_sync_client(
    hub: Hub, app: FastAPI, asgi: httpx.ASGITransport, admin_key: str
) -> None:
    ids = await seed(hub)
    loop = asyncio.get_running_loop()
    flaky = FlakyTransport(asgi, "/admin/dlq/replay")
    bridge = LoopBridge(flaky, loop)

    def work() -> dict[str, Any]:
        with HubClient(BASE_URL, admin_key, transport=bridge, retry=FAST) as client:
            listed = [x.id for x in client.dlq_iter(page_size=2)]
            detail = client.dlq_get(ids[4])
            dismissed = client.dlq_dismiss([ids[3]], "noise").dismissed
            accepted = client.dlq_replay_bulk(consumer=fx.GROUP)
            job = client.wait_job(accepted.job_id, timeout=10, interval=0.02)
            try:
                client.dlq_get(999_999)
                missing = None
            except NotFound as exc:
                missing = exc.type
        with HubClient(BASE_URL, "wrong", transport=bridge, retry=NO_RETRY) as stranger:
            try:
                stranger.outbox()
                denied = None
            except Unauthorized as exc:
                denied = exc.status
        return {
            "listed": listed,
            "raw": detail.raw,
            "dismissed": dismissed,
            "job": (job.status, job.total, job.done, job.failed),
            "missing": missing,
            "denied": denied,
        }

    got = await asyncio.to_thread(work)
    assert got["listed"] == ids[::-1]
    assert got["raw"] == "/25vdCBhbiBlbnZlbG9wZQ=="
    assert got["dismissed"] == 1
    assert got["job"] == ("done", 4, 3, 1)
    assert got["missing"] == problems.type_uri("not-found")
    assert got["denied"] == 401
    keys = {r.headers["Idempotency-Key"] for r in flaky.seen}
    assert len(flaky.seen) == 2 and len(keys) == 1
