"""Every route, called as tenant B with tenant A's ids: never a 2xx, never a side effect.

A streaming operation (``text/event-stream``, e.g. ``GET /v1/events``) has no ids in its
path and answers every tenant 200 with *its own* events, so it is held to the honest bar
instead: called as B with a bound (``max_seconds``), a subject of A and a resume position
that would replay A's notification, it must carry no event at all.

The test enumerates the app's operations (from its OpenAPI document, which lists every
route however it was mounted), so a route added later (by a pipeline) is covered the day it
lands: its path parameters must have an entry in ``IDS_OF_TENANT_A`` or the test fails.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest
import sqlalchemy as sa
from fastapi import FastAPI

from aigc_hub import tenancy
from aigc_hub.bootstrap import Hub
from aigc_hub.interfaces.http.app import create_app
from aigc_hub.messaging.memory import MemoryBroker
from aigc_hub.pipelines.generation import services
from aigc_hub.pipelines.generation.pipeline import pipeline as generation
from aigc_hub.reliability import notifications
from aigc_hub.reliability.dlq import DeadLetterFilter
from aigc_hub.reliability.notifications import Notification
from aigc_hub.reliability.replay_jobs import ReplayJobs
from aigc_hub.store import tables
from tests.integration.test_admin_api import seed
from tests.support import effects as fx
from tests.support.hubs import hub_for

#: Routes anyone may call (no tenant data behind them).
PUBLIC = {"/healthz", "/readyz", "/metrics"}
#: Reads of the caller's own collection: B gets 200 with its own (empty) data, never A's.
OWN_COLLECTIONS = {("GET", "/v1/generation-tasks"), ("GET", "/v1/credits")}


async def _dead_letter_of_a(hub: Hub) -> str:
    return str((await seed(hub))[0])


async def _job_of_a(hub: Hub) -> str:
    jobs = ReplayJobs(hub.engine, hub.dlq, hub.clock, rate_per_s=0)
    job = await jobs.start(DeadLetterFilter(topic="none"), max_items=1, actor="admin:a")
    await jobs.wait(job.id)
    await jobs.close()
    return job.id


async def _task_of_a(hub: Hub) -> str:
    tenant_a = next(t for t in await tenancy.list_tenants(hub.engine) if t.name == "tenant-a")
    await services.grant_credits(hub, tenant_id=tenant_a.id, amount=1000, grant_id="iso-a")
    body = services.CreateTask(model="local-v1", prompt="p", duration_s=1, resolution="160x90")
    task = await services.create_task(
        hub, tenant_id=tenant_a.id, body=body, idempotency_key="iso-a-1"
    )
    return str(task["task_id"])


async def _provider(hub: Hub) -> str:
    return "local"  # B is not a provider: no signature → 401, nothing archived


def _streams(operation: dict[str, object]) -> bool:
    ok = operation.get("responses", {}).get("200", {})  # type: ignore[attr-defined]
    return "text/event-stream" in ok.get("content", {})


async def _stream_params_of_a(hub: Hub, tenant_a: str) -> dict[str, object]:
    """Query parameters that would make a stream leak A's notification, if it could."""
    feed = hub.notification_feed
    await feed.start()

    def note(subject: str) -> Notification:
        return Notification(
            tenant_id=tenant_a,
            subject_type="generation_task",
            subject_id=subject,
            kind="status",
            status="RUNNING",
            occurred_at_ms=1,
        )

    before = feed.add(note("task-of-a-0"))
    feed.add(note("task-of-a"))
    return {"max_seconds": 0.5, "subject_id": "task-of-a", "last_event_id": before.id}


#: How to make a resource of tenant A for each path parameter name.
IDS_OF_TENANT_A: dict[str, Callable[[Hub], Awaitable[str]]] = {
    "dead_letter_id": _dead_letter_of_a,
    "job_id": _job_of_a,
    "task_id": _task_of_a,
    "provider": _provider,
}


@pytest.fixture
async def hub(db_url: str) -> AsyncIterator[Hub]:
    pipelines = [fx.make_pipeline(), notifications.pipeline, generation]
    async with hub_for(db_url, MemoryBroker(), pipelines) as started:
        yield started


async def _row_counts(hub: Hub) -> dict[str, int]:
    async with hub.engine.connect() as conn:
        return {
            t.name: int(
                (await conn.execute(sa.select(sa.func.count()).select_from(t))).scalar_one()
            )
            for t in tables.metadata.sorted_tables
        }


async def test_tenant_b_never_gets_a_2xx_or_an_effect_with_tenant_a_ids(hub: Hub) -> None:
    app: FastAPI = create_app(hub)
    tenant_a, key_a = await tenancy.create_tenant(hub.engine, "tenant-a")
    _, key_b = await tenancy.create_tenant(hub.engine, "tenant-b")
    assert key_a != key_b
    ids = {name: await make(hub) for name, make in IDS_OF_TENANT_A.items()}
    stream_params = await _stream_params_of_a(hub, tenant_a.id)
    before = await _row_counts(hub)

    calls = 0
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://hub.test") as client:
        for template, operations in app.openapi()["paths"].items():
            if template in PUBLIC:
                continue
            params = re.findall(r"{(\w+)}", template)
            missing = [p for p in params if p not in ids]
            assert not missing, f"{template}: add a tenant-A id maker for {missing}"
            path = template.format(**{p: ids[p] for p in params})
            for method in sorted(m.upper() for m in operations):
                streams = _streams(operations[method.lower()])
                response = await client.request(
                    method,
                    path,
                    params=stream_params if streams else None,
                    json={} if method in ("POST", "PUT", "PATCH") else None,
                    headers={"Authorization": f"Bearer {key_b}", "Idempotency-Key": "b-1"},
                )
                calls += 1
                if (method, template) in OWN_COLLECTIONS:
                    assert response.status_code == 200, (method, path, response.text)
                    assert not any(v in response.text for v in ids.values() if len(v) > 8)
                    continue
                if streams and response.status_code == 200:
                    assert "event:" not in response.text, (method, path, response.text)
                    continue
                assert not 200 <= response.status_code < 300, (method, path, response.text)
                assert response.status_code in (401, 403, 404, 422), (method, path, response.text)
    assert calls >= 10  # every admin route and the event stream were tried
    assert await _row_counts(hub) == before  # and nothing changed anywhere
